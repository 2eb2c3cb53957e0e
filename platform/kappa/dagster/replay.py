"""The ``replay`` job: replay the log into a new version of an asset (and of every asset downstream
of it), run the gate, and with ``promote: true`` promote the chain atomically.

It is :func:`kappa.lifecycle.promotion.replay` launched from the UI (Jobs -> replay -> Launchpad):

.. code-block:: yaml

    ops:
      replay_asset:
        config:
          asset: flights      # a dropdown of the declared assets
          promote: true

What the run records: every gate check of every new version as an asset check evaluation (so a
failing expectation shows on the asset, with the candidate version and by how much it failed), and a
materialization of each asset when the chain was promoted (an observation when it was not: the
stable name still points at the old version). The run fails when retention no longer covers the log
(:class:`kappa.lifecycle.promotion.RetentionError`), or when ``promote`` was asked and the gate refused.
"""


from typing import TYPE_CHECKING

import dagster as dg

from kappa.dagster.failure import as_failure
from kappa.dagster.metadata import ProgressLog, check_description, check_metadata, result_metadata
from kappa.dagster.names import REPLAY_JOB, LoadOptions

if TYPE_CHECKING:
    from kappa.spec import Catalog


def build_replay_job(catalog: "Catalog", options: LoadOptions) -> dg.JobDefinition:
    """The ``replay`` job of the module docstring: one op, ``replay_asset``, configured with
    ``asset`` (an enum of ``catalog``'s assets, in dependency order) and ``promote`` (default
    false); it needs the ``kappa`` resource. The op returns a summary (new versions, ``promoted``,
    ``seconds``, the blocking checks that failed, the versions stopped) and raises
    ``dg.Failure`` for a library error or a refused promotion."""
    names = catalog.topological()
    asset_enum = dg.Enum("StreamingAsset", [dg.EnumValue(n) for n in names])

    @dg.op(
        name="replay_asset",
        config_schema={
            "asset": dg.Field(asset_enum, description="The asset to replay; its downstream assets follow."),
            "promote": dg.Field(bool, default_value=False,
                                description="Promote the new versions (atomically) if every blocking check passes."),
        },
        required_resource_keys={"kappa"},
        tags={"kind": "spark"},
    )
    def replay_op(context: dg.OpExecutionContext) -> dict:
        from kappa.delta.registry import Registry
        from kappa.lifecycle.promotion import replay

        asset, promote = context.op_config["asset"], context.op_config["promote"]
        kappa = context.resources.kappa
        settings = kappa.settings(assets_dir=str(options.assets_path))
        registry = Registry(settings)  # the op's one snapshot, with everything the replay recorded
        with as_failure(asset=asset):  # RetentionError, a failed query, …
            report = replay(settings, asset, promote=promote, runner=kappa.build_runner(settings),
                            on_progress=ProgressLog(context), on_step=context.log.info,
                            timeout_s=kappa.catch_up_timeout_s, registry=registry)

        failed: list[str] = []
        for name, gate in report.gates.items():
            key = dg.AssetKey(name)
            for c in gate.checks:
                if not c.passed and c.blocking:
                    failed.append(check_description(c, gate))
                context.log_event(dg.AssetCheckEvaluation(
                    asset_key=key, check_name=c.name, passed=bool(c.passed), blocking=bool(c.blocking),
                    severity=dg.AssetCheckSeverity.ERROR if c.blocking else dg.AssetCheckSeverity.WARN,
                    description=check_description(c, gate), metadata={**check_metadata(c, gate), "candidate": True},
                ))
        for r in report.results:
            gate = report.gates.get(r.asset)
            md = {**result_metadata(r, registry.version(r.asset, r.version)),
                  "replay": True, "promoted": bool(report.promoted),
                  "gate_passed": bool(gate.passed) if gate is not None else dg.MetadataValue.null()}
            event_cls = dg.AssetMaterialization if report.promoted else dg.AssetObservation
            context.log_event(event_cls(asset_key=dg.AssetKey(r.asset), metadata=md,
                                        description=f"replayed into {r.asset}/v{r.version}"))
        summary = {"versions": dict(report.versions), "promoted": bool(report.promoted),
                   "seconds": float(report.seconds), "failed_checks": failed, "stopped": list(report.stopped)}
        context.log.info(f"replay of {asset}: {summary}")
        if promote and not report.promoted:
            raise dg.Failure(
                description="the gate refused promotion; the promoted versions are unchanged:\n" + "\n".join(failed),
                metadata={"versions": dg.MetadataValue.json(dict(report.versions)),
                          "failed_checks": dg.MetadataValue.json(failed)},
            )
        return summary

    @dg.job(
        name=REPLAY_JOB,
        description="Replay the Kafka log into a new version of an asset and its downstream assets, "
                    "gate them, and optionally promote the chain atomically.",
        tags={"kappa/kind": "replay"},
    )
    def replay_job():
        replay_op()

    return replay_job
