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
* No automation conditions or schedules: a streaming asset runs when someone materializes it (until
  caught up, or long-running), and the sensor watches it.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kappa.config import load_settings
from kappa.dagster.component import StreamingAssets
from kappa.dagster.resources import KappaResource


def build_definitions(
    assets_dir: str | Path | None = None,
    *,
    resource: KappaResource | None = None,
    continuous: list[str] | None = None,
) -> dg.Definitions:
    """Definitions for the assets in ``assets_dir`` (default: ``KAPPA_ASSETS_DIR`` or
    ``<project>/assets``). Raises :class:`kappa.spec.SpecError` naming the file and field of a bad
    declaration."""
    folder = Path(assets_dir) if assets_dir is not None else load_settings().assets_dir
    component = StreamingAssets(assets_dir=str(folder), continuous=list(continuous or []))
    return dg.Definitions.merge(
        dg.build_defs_for_component(component),
        dg.Definitions(resources={"kappa": resource or KappaResource()}, executor=dg.in_process_executor),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
