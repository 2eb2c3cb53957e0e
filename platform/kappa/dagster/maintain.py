"""The ``maintain`` job and its schedule: :func:`kappa.lifecycle.maintain.maintain` (OPTIMIZE, a Delta
checkpoint and VACUUM of every asset version and the shared tables) run outside the streaming
queries, which keep running. Launched by the ``kappa_maintain`` schedule (daily at 03:00 UTC by
default: the component's ``maintain_cron``) or from the UI (Jobs -> maintain -> Launchpad):

.. code-block:: yaml

    ops:
      maintain_tables:
        config:
          assets: [flights]        # default []: every asset
          retention_hours: null    # default: each table's VACUUM retention (Delta's 7 days)
          requested_by: ""         # who asks, with retention_hours (shown as claimed)

With ``retention_hours`` null (the schedule's run), the op maintains at once: each table's own
retention, what Delta keeps anyway. It logs one line per table (files, bytes, rows and Delta version
before and after) and returns the report; the run fails (``dg.Failure``) when a table failed, after
every other table was done.

With a ``retention_hours`` of its own the run destroys time travel on request, so it does not
maintain: it records a request (:func:`kappa.lifecycle.approval.request_maintain`) that runs when
someone with the platform role runs ``kappa approve REQUEST``, and returns ``request_id``. A
retention below the platform floor (``KAPPA_MIN_RETENTION_HOURS``, default 168 hours: Delta's
default ``delta.deletedFileRetentionDuration``) is refused outright: the step fails, nothing is
recorded.
"""

from typing import TYPE_CHECKING

import dagster as dg

from kappa.dagster.names import MAINTAIN_JOB, MAINTAIN_SCHEDULE, LoadOptions
from kappa.dagster.failure import as_failure

if TYPE_CHECKING:
    from kappa.spec import Catalog


def build_maintain_job(catalog: "Catalog", options: LoadOptions) -> dg.JobDefinition:
    """The ``maintain`` job: one op, ``maintain_tables``, configured with ``assets`` (a list of
    ``catalog``'s asset names; empty: all), ``retention_hours`` (None: Delta's default, run now;
    given: a request for ``kappa approve``) and ``requested_by``; needs the ``kappa`` resource. One
    run at a time (pool ``kappa_maintain``)."""
    asset_enum = dg.Enum("MaintainedAsset", [dg.EnumValue(n) for n in catalog.topological()])

    @dg.op(
        name="maintain_tables",
        config_schema={
            "assets": dg.Field([asset_enum], default_value=[],
                               description="Assets whose versions to maintain (empty: all); the shared tables always."),
            "retention_hours": dg.Field(dg.Noneable(float), default_value=None,
                                        description="VACUUM retention in hours, at least the platform floor "
                                                    "(KAPPA_MIN_RETENTION_HOURS, 168); default: each table's (Delta's "
                                                    "7 days). Given, the run only records a request for `kappa "
                                                    "approve`."),
            "requested_by": dg.Field(str, default_value="",
                                     description="Who asks, required with retention_hours (shown as claimed)."),
        },
        required_resource_keys={"kappa"},
        tags={"kind": "delta"},
        pool="kappa_maintain",
    )
    def maintain_op(context: dg.OpExecutionContext) -> dict:
        from kappa.lifecycle.maintain import maintain

        kappa = context.resources.kappa
        settings = kappa.settings(assets_dir=str(options.assets_path))
        assets = list(context.op_config["assets"]) or None
        retention = context.op_config["retention_hours"]
        if retention is not None:
            from kappa.lifecycle.approval import request_maintain

            with as_failure():  # below the floor, an unknown asset, no requester
                req = request_maintain(settings, assets, retention, claimed_by=context.op_config["requested_by"],
                                       origin=f"dagster run {context.run_id}")
            context.log.info(f"recorded request {req.request_id}: {req.describe()}, claimed by {req.claimed_by}; "
                             f"nothing runs until someone with the platform role runs "
                             f"`kappa approve {req.request_id}`")
            return {"request_id": req.request_id, "state": req.state, "approve_with": f"kappa approve {req.request_id}"}
        with as_failure():
            report = maintain(settings, assets,
                              say=context.log.info, on_table=lambda t: context.log.info(
                                  f"{t.table}: files {t.files_before} -> {t.files_after}, bytes {t.bytes_before} -> "
                                  f"{t.bytes_after}, rows {t.rows_after}, Delta version {t.version_before} -> "
                                  f"{t.version_after}, vacuumed {t.vacuumed} files in {t.seconds} s"
                                  + (f"; FAILED {t.error}" if t.error else "") + (f"; {t.skipped}" if t.skipped else "")))
        summary = report.to_json()
        if report.failed:
            raise dg.Failure(description="maintenance failed for " + ", ".join(f"{t.table} ({t.error})" for t in report.failed),
                             metadata={"report": dg.MetadataValue.json(summary)})
        return summary

    @dg.job(name=MAINTAIN_JOB, tags={"kappa/kind": "maintain"},
            description="Compact (OPTIMIZE), checkpoint and VACUUM every asset version and the shared tables, "
                        "outside the streaming queries.")
    def maintain_job():
        maintain_op()

    return maintain_job


def build_maintain_schedule(job: dg.JobDefinition, options: LoadOptions) -> dg.ScheduleDefinition:
    """The ``kappa_maintain`` schedule: ``job`` (every asset, Delta's retention) on
    ``options.maintain_cron``, UTC, running by default."""
    return dg.ScheduleDefinition(name=MAINTAIN_SCHEDULE, job=job, cron_schedule=options.maintain_cron,
                                 execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
                                 description="Table maintenance off the streaming queries' hot path.")
