"""The Dagster code location: every streaming asset in ``assets/``, plus the run policy.

``dagster dev`` and ``dagster definitions validate`` find this module through ``pyproject.toml``::

    [tool.dagster]
    module_name = "kappa.dagster.definitions"
    code_location_name = "kappa"

Policy lives here and only here:

* Every step of a run executes in the run's own process (``in_process_executor``): a streaming
  asset's step starts a Spark driver JVM (``local[*]``, 4 GB heap by default), so one JVM per run,
  shared by its steps through ``SparkSession.getOrCreate``, instead of one per step.
* Settings come from ``KAPPA_*`` when a run or tick needs them (``KappaResource``), so the same code
  location serves ``make dagster`` and a deployment that sets the environment.
* No automation conditions or schedules on streaming assets: one runs when someone materializes it
  (until caught up, or long-running), and the sensor watches it. The ``kappa_registry`` sensor
  reports every promotion and rollback, from whatever front end, as a materialization of the
  stable-name asset with the promoted version's gate as its checks.
* The dbt models in ``dbt/`` (:mod:`kappa.dagster.dbt`) are downstream of the streaming assets they
  read and rebuild on their ``eager`` automation condition when one of those is promoted or rolled
  back (the ``kappa_automation`` sensor evaluates it).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kappa.config import load_settings
from kappa.dagster.component import StreamingAssets
from kappa.dagster.registry import build_registry_sensor
from kappa.dagster.resources import KappaResource, sealed

AUTOMATION_SENSOR = "kappa_automation"


def build_definitions(
    assets_dir: str | Path | None = None,
    *,
    resource: KappaResource | None = None,
    continuous: list[str] | None = None,
    dbt: bool = True,
) -> dg.Definitions:
    """Definitions for the assets in ``assets_dir`` (default: ``KAPPA_ASSETS_DIR`` or
    ``<project>/assets``). Raises :class:`kappa.spec.SpecError` naming the file and field of a bad
    declaration; with ``dbt``, :class:`kappa.analytics.dbt.DbtError` if the dbt project does not parse."""
    settings = load_settings()
    folder = Path(assets_dir) if assets_dir is not None else settings.assets_dir
    component = StreamingAssets(assets_dir=str(folder), continuous=list(continuous or []))
    parts = [
        dg.build_defs_for_component(component),
        dg.Definitions(sensors=[build_registry_sensor(component.catalog, component.options)],
                       resources={"kappa": sealed(resource or KappaResource(), "kappa")},
                       executor=dg.in_process_executor),
    ]
    if dbt:
        from kappa.dagster.dbt import GROUP, build_dbt_definitions

        parts.append(build_dbt_definitions(settings))
        parts.append(dg.Definitions(sensors=[dg.AutomationConditionSensorDefinition(
            AUTOMATION_SENSOR, target=dg.AssetSelection.groups(GROUP), minimum_interval_seconds=30,
            default_status=dg.DefaultSensorStatus.RUNNING,
            description="Evaluates the dbt models' automation conditions: an upstream promotion or "
                        "rollback rebuilds the models below it.")]))
    return dg.Definitions.merge(*parts)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
