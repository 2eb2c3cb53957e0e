"""The ``promote_version`` and ``rollback`` jobs: ``kappa promote`` and ``kappa rollback`` from the UI
(Jobs -> promote_version | rollback -> Launchpad). Each calls the same library function as its
CLI twin, :func:`kappa.lifecycle.promotion.promote` and :func:`~kappa.lifecycle.promotion.rollback`:

.. code-block:: yaml

    ops:
      promote_stable_name:
        config:
          asset: departures_hourly
          version: 2
          only: false        # kappa promote --only: promote it alone despite differing pins

    ops:
      rollback_stable_names:
        config:
          asset: departures_hourly   # every name promoted with it goes back, in one commit

``promote_version`` runs the version's gate first when it never ran (on the code location's runner,
``KappaResource.build_runner``: the runner ``kappa promote`` picks from the same ``KAPPA_*``), and
refuses a failed gate or a promotion that would leave names pinned over different versions of one
upstream. Both move stable names in ONE registry commit. The step's output (and its metadata) is
that commit: ``promoted`` (asset -> version: the chain; for a rollback, what each stable name now
points at), ``previous`` (asset -> the version it pointed at before), ``pins`` (asset -> version
and pinned snapshot, the Delta table version readers see, for every name the commit pinned, the
re-pinned names of the same lineages included), ``unverified`` (asset -> why that pin's consistency
was not evaluated: a pin the cut could not verify is named, never shown as consistent). A :class:`~kappa.errors.KappaError` (an unknown
version, a failed gate, nothing to roll back to) fails the step with the library's message.

The jobs record no asset events themselves: the ``kappa_registry`` sensor reports every promotion
and rollback, whatever front end made it, as a materialization of the stable-name asset with the
promoted version's gate as its checks (:mod:`kappa.dagster.registry`). One promotion or rollback
runs at a time (pool ``kappa_promotion``).
"""

import dagster as dg
from pydantic import Field

from kappa.dagster.names import PROMOTE_JOB, ROLLBACK_JOB, LoadOptions
from kappa.dagster.failure import as_failure

#: Promotions and rollbacks from Dagster run one at a time (the pool's limit is 1, dagster.yaml):
#: a promotion checks the pins it would leave, then commits; two at once could each pass the check.
POOL = "kappa_promotion"


class PromoteConfig(dg.Config):
    """Run config of ``promote_version`` (``kappa promote ASSET VERSION [--only]``)."""

    asset: str = Field(description="The asset whose stable name to move (its name in assets/).")
    version: int = Field(description="The version to promote: 2 for v2 (`kappa versions ASSET` lists them).")
    only: bool = Field(False, description="Promote this version alone even if a downstream (or upstream) stable "
                       "name stays pinned over a different version of it (kappa promote --only).")


class RollbackConfig(dg.Config):
    """Run config of ``rollback`` (``kappa rollback ASSET``)."""

    asset: str = Field(description="The asset to roll back: every stable name promoted together with its current "
                       "version (a replay's chain) goes back to its previously promoted version, in one commit.")


def commit_summary(events: list[dict]) -> dict:
    """``promoted`` (asset -> version), ``previous`` (asset -> version before, None: none),
    ``pins`` (asset -> ``{"version", "snapshot"}``, the Delta table version its readers see) and
    ``unverified`` (asset -> why its pin's consistency was not evaluated,
    :func:`kappa.lifecycle.cut.unverified`) of one registry commit
    (:func:`kappa.lifecycle.promotion.last_promotion`)."""
    from kappa.lifecycle.cut import unverified

    moved = [e for e in events if e["event"] == "promoted"]
    return {
        "unverified": unverified({e["asset"]: e["details"] for e in events if "snapshot" in e["details"]}),
        "promoted": {e["asset"]: e["version"] for e in moved},
        "previous": {e["asset"]: e["details"].get("previous") for e in moved},
        "pins": {e["asset"]: {"version": e["version"], "snapshot": e["details"].get("snapshot")} for e in events},
        "committed_at": moved[0]["at"].isoformat(),
    }


def _output(summary: dict) -> dg.Output:
    return dg.Output(summary, metadata={
        "promoted": dg.MetadataValue.json(summary["promoted"]),
        "previous": dg.MetadataValue.json(summary["previous"]),
        "pins": dg.MetadataValue.json(summary["pins"]),
        "unverified": dg.MetadataValue.json(summary["unverified"]),
        "committed_at": summary["committed_at"],
    })


def build_promote_job(options: LoadOptions) -> dg.JobDefinition:
    """The ``promote_version`` job (module docstring): one op, ``promote_stable_name``, configured by
    :class:`PromoteConfig`; needs the ``kappa`` resource."""

    @dg.op(name="promote_stable_name", required_resource_keys={"kappa"}, tags={"kind": "delta"}, pool=POOL,
           out=dg.Out(dict, description="The registry commit: promoted, previous, pins, committed_at."))
    def promote_op(context: dg.OpExecutionContext, config: PromoteConfig) -> dg.Output:
        from kappa.delta.registry import Registry
        from kappa.lifecycle.promotion import last_promotion, promote

        kappa = context.resources.kappa
        settings = kappa.settings(assets_dir=str(options.assets_path))
        # a failed gate, differing pins, an unknown or retired version, …
        registry = Registry(settings)  # the op's one snapshot: it sees its own promotion
        with as_failure(asset=config.asset, version=config.version):
            report = promote(settings, config.asset, config.version, runner=kappa.build_runner(settings),
                             only=config.only, registry=registry)
        if report is not None:
            context.log.info(f"gate of {config.asset}/v{config.version} ran: passed "
                             f"({len(report.checks)} checks)")
        summary = commit_summary(last_promotion(registry, config.asset))
        context.log.info(f"{config.asset} -> v{config.version}; pins: {summary['pins']}")
        return _output(summary)

    @dg.job(name=PROMOTE_JOB, tags={"kappa/kind": "promote"},
            description="Point an asset's stable name at a version whose gate passed, in one registry commit "
                        "(kappa promote ASSET VERSION).")
    def promote_job():
        promote_op()

    return promote_job


def build_rollback_job(options: LoadOptions) -> dg.JobDefinition:
    """The ``rollback`` job (module docstring): one op, ``rollback_stable_names``, configured by
    :class:`RollbackConfig`; needs the ``kappa`` resource."""

    @dg.op(name="rollback_stable_names", required_resource_keys={"kappa"}, tags={"kind": "delta"}, pool=POOL,
           out=dg.Out(dict, description="The registry commit: promoted (what each stable name now points at), "
                                        "previous, pins, committed_at."))
    def rollback_op(context: dg.OpExecutionContext, config: RollbackConfig) -> dg.Output:
        from kappa.delta.registry import Registry
        from kappa.lifecycle.promotion import last_promotion, rollback

        settings = context.resources.kappa.settings(assets_dir=str(options.assets_path))
        registry = Registry(settings)  # the op's one snapshot: it sees its own rollback
        with as_failure(asset=config.asset):  # never promoted, nothing before, promoted again since, …
            targets = rollback(settings, config.asset, runner=context.resources.kappa.build_runner(settings),
                               on_step=context.log.info, registry=registry)
        summary = commit_summary(last_promotion(registry, config.asset))
        context.log.info(", ".join(f"{a} -> v{v}" for a, v in targets.items()) + " (rolled back)")
        return _output(summary)

    @dg.job(name=ROLLBACK_JOB, tags={"kappa/kind": "rollback"},
            description="Point the stable names promoted with an asset back at their previously promoted "
                        "versions, in one registry commit (kappa rollback ASSET).")
    def rollback_job():
        rollback_op()

    return rollback_job
