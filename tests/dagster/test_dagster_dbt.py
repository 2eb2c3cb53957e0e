"""The dbt project as Dagster assets: lineage from the streaming assets, dbt tests as checks, the
eager automation condition; and the registry sensor's events. No broker or Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kappa.dagster.definitions import build_definitions

REPO = Path(__file__).resolve().parents[2]


def test_dbt_models_are_downstream_of_the_streaming_assets_with_tests_as_checks_and_eager_automation():
    graph = build_definitions(REPO / "assets").get_repository_def().asset_graph
    stg = graph.get(dg.AssetKey("stg_kappa__flights"))
    assert stg.parent_keys == {dg.AssetKey("flights")}  # the dbt source is the stable-name asset
    mart = graph.get(dg.AssetKey("carrier_daily_performance"))
    assert mart.parent_keys == {dg.AssetKey("stg_kappa__flights"), dg.AssetKey("stg_nycflights13__airlines")}
    assert mart.group_name == "analytics" and "dbt" in mart.kinds
    assert mart.automation_condition == dg.AutomationCondition.eager()
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
    events, _ = registry_events_since(registry, cursor, declared)
    [mat] = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert mat.metadata["version"].value == 1 and mat.metadata["reason"].value == "rollback"
    assert mat.metadata["previous"].value == 2
