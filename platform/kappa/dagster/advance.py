"""The ``advance`` job and the ``kappa_advance`` sensor: :func:`kappa.lifecycle.cut.advance` (move the
stable names' pinned snapshots to the newest consistent cut, in one registry commit) from Dagster.

The sensor looks, every ``advance_interval_s`` seconds, whether any promoted version's table has
Delta commits after its pinned snapshot (a continuously running promoted asset has written since the
cut) and then requests one ``advance`` run (run key: the registry's Delta version and the tables'
versions, so one change is advanced once). It runs by default when the component declares
``continuous`` assets (the only case where promoted tables move on by themselves), else it is off
and can be turned on in the UI. The job can also be launched by hand (Jobs -> advance):

.. code-block:: yaml

    ops:
      advance_cut:
        config:
          assets: []      # default: every lineage; else only the lineages of these assets
          wait_s: 30      # seconds to wait for running readers to agree on an upstream version

The op's output is the report (``pins``, ``moved``, ``refused``, ``unverified``: asset -> why its
new pin's consistency was not evaluated; ``moved`` and ``unverified`` also as metadata); a lineage that could not be cut
keeps its pins and fails the run (``dg.Failure`` naming it) after the others moved.
"""


from typing import TYPE_CHECKING

import dagster as dg

from kappa.dagster.names import ADVANCE_JOB, ADVANCE_SENSOR, LoadOptions
from kappa.dagster.failure import as_failure

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.spec import Catalog


def build_advance_job(catalog: "Catalog", options: LoadOptions) -> dg.JobDefinition:
    """The ``advance`` job: one op, ``advance_cut``, configured with ``assets`` (names of
    ``catalog``; empty: every lineage) and ``wait_s``; needs the ``kappa`` resource. One run at a
    time (pool ``kappa_advance``)."""
    asset_enum = dg.Enum("AdvancedAsset", [dg.EnumValue(n) for n in catalog.topological()])

    @dg.op(
        name="advance_cut",
        config_schema={
            "assets": dg.Field([asset_enum], default_value=[],
                               description="Move only these assets' lineages (empty: all)."),
            "wait_s": dg.Field(float, default_value=30.0,
                               description="Seconds to wait for running readers to agree on an upstream version."),
        },
        required_resource_keys={"kappa"},
        tags={"kind": "delta"},
        pool="kappa_advance",
    )
    def advance_op(context: dg.OpExecutionContext) -> dg.Output:
        from kappa.lifecycle.cut import advance

        settings = context.resources.kappa.settings(assets_dir=str(options.assets_path))
        with as_failure():
            report = advance(settings, list(context.op_config["assets"]) or None, reason="dagster",
                             wait_s=context.op_config["wait_s"])
        for asset, (before, after) in sorted(report.moved.items()):
            context.log.info(f"{asset}: Delta version {'latest' if before is None else before} -> {after}")
        out = report.to_json()
        for why in sorted(out["unverified"].values()):
            context.log.warning(f"pin not verified: {why}")
        if report.refused:
            raise dg.Failure(description="the cut did not move for " + "; ".join(
                f"{group}: {why}" for group, why in report.refused.items()), metadata={"report": dg.MetadataValue.json(out)})
        return dg.Output(out, metadata={"moved": dg.MetadataValue.json(out["moved"]),
                                        "unverified": dg.MetadataValue.json(out["unverified"])})

    @dg.job(name=ADVANCE_JOB, tags={"kappa/kind": "advance"},
            description="Move the stable names' pinned snapshots to the newest consistent cut (one registry commit).")
    def advance_job():
        advance_op()

    return advance_job


def behind(settings: "Settings") -> dict[str, tuple[int, int]]:
    """asset -> (pinned snapshot, the table's latest Delta version) for every promoted version whose
    table has commits after its snapshot."""
    from kappa.delta.registry import Registry
    from kappa.delta.tables import is_table, open_table

    out = {}
    for asset, v in Registry(settings).promoted_all().items():
        if v.snapshot is None:
            continue
        if is_table(v.table_path, settings):
            latest = open_table(v.table_path, settings).version()
            if latest > v.snapshot:
                out[asset] = (v.snapshot, latest)
    return out


def build_advance_sensor(job: dg.JobDefinition, options: LoadOptions) -> dg.SensorDefinition:
    """The ``kappa_advance`` sensor (module docstring): a run of ``job`` when a promoted table has
    moved past its pinned snapshot; running by default only with ``continuous`` assets."""

    @dg.sensor(name=ADVANCE_SENSOR, job=job, minimum_interval_seconds=options.advance_interval_s,
               required_resource_keys={"kappa"},
               default_status=(dg.DefaultSensorStatus.RUNNING if options.continuous
                               else dg.DefaultSensorStatus.STOPPED),
               description="Moves the cut forward when promoted tables have commits after their pinned snapshots.")
    def advance_sensor(context: dg.SensorEvaluationContext):
        from kappa.services.serve import registry_version

        settings = context.resources.kappa.settings(assets_dir=str(options.assets_path))
        moved = behind(settings)
        if not moved:
            return dg.SkipReason("every promoted table is at its pinned snapshot")
        key = f"{registry_version(settings)}:" + ",".join(f"{a}={latest}" for a, (_, latest) in sorted(moved.items()))
        return dg.RunRequest(run_key=key, tags={"kappa/assets": ",".join(sorted(moved))})

    return advance_sensor
