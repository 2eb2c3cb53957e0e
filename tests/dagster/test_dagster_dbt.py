"""The dbt project as Dagster assets: lineage from the streaming assets, dbt tests as checks, the
eager automation condition; and the registry sensor's events. No broker or Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kappa.dagster.dbt import AUTOMATION
from kappa.dagster.definitions import build_definitions

REPO = Path(__file__).resolve().parents[2]


def test_dbt_models_are_downstream_of_the_streaming_assets_with_tests_as_checks_and_eager_automation():
    graph = build_definitions(REPO / "assets").get_repository_def().asset_graph
    stg = graph.get(dg.AssetKey("stg_kappa__flights"))
    assert stg.parent_keys == {dg.AssetKey("flights")}  # the dbt source is the stable-name asset
    mart = graph.get(dg.AssetKey("carrier_daily_performance"))
    assert mart.parent_keys == {dg.AssetKey("stg_kappa__flights"), dg.AssetKey("stg_nycflights13__airlines")}
    assert mart.group_name == "analytics" and "dbt" in mart.kinds
    assert mart.automation_condition == AUTOMATION
    checks = {ck.name for ck in graph.asset_check_keys if ck.asset_key == dg.AssetKey("carrier_daily_performance")}
    assert "unique_combination_of_columns_carrier_daily_performance_carrier__flight_date" in checks
    assert "not_null_carrier_daily_performance_name" in checks
    weather = graph.get(dg.AssetKey("origin_daily_weather_delays"))
    assert dg.AssetKey("stg_kappa__weather") in weather.parent_keys
    assert graph.get(dg.AssetKey("stg_kappa__weather")).parent_keys == {dg.AssetKey("weather")}


def test_registry_events_become_a_materialization_and_the_promoted_versions_checks(tmp_path):
    """A version promoted by the library (as the CLI does) is reported on the first tick: its
    materialization with version and row count, and its gate's declared checks with metadata; a
    later rollback is a new materialization."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from kappa.config import load_settings
    from kappa.dagster.registry import registry_events_since
    from kappa.delta.registry import Registry

    settings = load_settings(project_dir=REPO, home=tmp_path / "home")
    registry = Registry(settings)
    for n in (1, 2):
        v = registry.create_version("flights", "fp", {})
        write_deltalake(v.table_path, pa.table({"event_id": [str(i) for i in range(10 * n)]}))
        registry.record("flights", v.version, "caught_up", rows=10 * n, end_offsets={"flights": {"0": 10 * n}})
        registry.record("flights", v.version, "gate_passed", data_docs=None, checks=[
            {"name": "shadow_diff", "passed": True, "blocking": False, "observed": {"rows": 10 * n}, "expected": "-"},
            {"name": "undeclared", "passed": True, "blocking": True, "observed": 1, "expected": "1"}])
        registry.promote({"flights": v.version}, reason="manual")
    declared = {"flights": ["shadow_diff", "quarantine_rate"]}

    events, cursor = registry_events_since(registry, None, declared)
    [mat] = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert mat.asset_key == dg.AssetKey("flights")
    assert mat.metadata["version"].value == 2 and mat.metadata["dagster/row_count"].value == 20
    assert mat.metadata["source_offsets"].value == {"flights": {"0": 20}}
    checks = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    # quarantine_rate was not evaluated by this gate: it stays "not evaluated", never "passed"
    assert [(c.check_name, c.passed) for c in checks] == [("shadow_diff", True)]
    assert checks[0].metadata["version"].value == 2

    assert registry_events_since(registry, cursor, declared)[0] == []
    from kappa.lifecycle.promotion import rollback

    assert rollback(settings, "flights") == {"flights": 1}
    registry.refresh()  # the rollback wrote through its own registry (the sensor reads a fresh one each tick)
    events, _ = registry_events_since(registry, cursor, declared)
    [mat] = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert mat.metadata["version"].value == 1 and mat.metadata["reason"].value == "rollback"
    assert mat.metadata["previous"].value == 2


def _requested(result) -> set[str]:
    return {r.key.to_user_string() for r in result.results if r.true_subset.size}


def test_the_automations_first_evaluation_builds_what_the_first_runs_tests_join():
    """On a fresh instance the first evaluation requests the seed and the model over it (missing,
    nothing upstream missing); with the streaming assets already reported it requests the whole
    project at once. Later evaluations are eager only: an upstream's new materialization (a
    promotion) requests the models below it, including the mart over the seed, and nothing else."""
    defs = build_definitions(REPO / "assets")
    graph = defs.get_repository_def().asset_graph
    dbt = dg.AssetSelection.keys(*(k for k in graph.get_all_asset_keys() if graph.get(k).group_name == "analytics"))
    seeded = {"nycflights13_airlines", "stg_nycflights13__airlines"}
    below_flights = {"stg_kappa__flights", "carrier_daily_performance"}
    everything = seeded | below_flights | {"stg_kappa__weather", "origin_daily_weather_delays"}

    def materialized(instance, keys) -> None:
        for key in keys:
            instance.report_runless_asset_event(dg.AssetMaterialization(key))

    with dg.instance_for_test() as instance:  # nothing promoted yet: only what needs no streaming asset
        first = dg.evaluate_automation_conditions(defs, instance, asset_selection=dbt)
        assert _requested(first) == seeded
        materialized(instance, seeded)
        second = dg.evaluate_automation_conditions(defs, instance, asset_selection=dbt, cursor=first.cursor)
        assert _requested(second) == set()  # built: not requested again
        materialized(instance, ["flights"])  # flights promoted
        third = dg.evaluate_automation_conditions(defs, instance, asset_selection=dbt, cursor=second.cursor)
        assert _requested(third) == below_flights
    with dg.instance_for_test() as instance:  # both streaming assets promoted before Dagster started
        materialized(instance, ["flights", "weather"])
        assert _requested(dg.evaluate_automation_conditions(defs, instance, asset_selection=dbt)) == everything
