"""delay_streaks: complex event processing (a pattern per tailnum) on real Kafka, Spark and Delta,
checked against a plain-Python computation of the same rule (tests/integration/helpers.py).

The bounded-slice test stops the queries mid-stream and restarts them from their checkpoints
(pending events, partial matches and event-time timers included), then replays the pattern into
v2 in one uninterrupted run: v1 must equal the independent computation and v2 row for row. The
log arrives in two parts, cut at an event time chosen so that two streaks of the slice (N13975
and N18557 on 2013-01-02) have their first two delayed departures behind the first part's final
watermark and their third after the cut: when the first part has been processed, those two
partial matches live only in the state store."""

from __future__ import annotations

import dataclasses
import threading
import time

import pandas as pd
import pytest

from kappa.delta.registry import Registry
from kappa.ingest.nycflights13 import load_events, publish
from kappa.promotion import promote, replay
from kappa.runners.local import resolve_versions, run_until_caught_up
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from .helpers import assert_streaks_equal, expected_delay_streaks, renamed, table

pytestmark = pytest.mark.integration

SLICE = 20_000  # the first 20,000 flights (to 2013-01-24): 10 matches
ASSETS = ["flights", "delay_streaks"]
CUT = pd.Timestamp("2013-01-02T18:00Z")  # event time at which the slice's log is cut in two
SPANNING = {"N13975", "N18557"}  # their streaks are two events in before the cut, one after


def _emitted(expected: pd.DataFrame, latest: pd.Timestamp) -> pd.DataFrame:
    """The matches a stream has written once it has read the whole log: those whose last departure
    is at or before the final watermark (latest event time - the asset's 2-hour delay); the others
    wait in state for later events."""
    return expected[expected.last_event_time <= latest - pd.Timedelta(hours=2)]


def _fast_trigger(name: str, doc: dict) -> None:
    doc["trigger"] = {"processing_time": "1 second"}


def _split(events, cut_ms: int):
    """The flights events before ``cut_ms`` (event time) and from it on, each in log order."""
    (flights,) = [e for e in events if e.topic.startswith("flights")]
    before = flights.timestamps_ms < cut_ms

    def take(mask):
        return dataclasses.replace(
            flights, keys=[k for k, m in zip(flights.keys, mask) if m],
            values=[v for v, m in zip(flights.values, mask) if m], timestamps_ms=flights.timestamps_ms[mask],
            event_ids=[e for e, m in zip(flights.event_ids, mask) if m])

    return [take(before)], [take(~before)]


def test_a_stop_mid_stream_and_restart_from_the_checkpoint_equals_the_truth_and_an_uninterrupted_replay(
        make_env, spark):
    settings, suffix = make_env(edit=_fast_trigger)
    expected, latest = expected_delay_streaks(SLICE)
    first, second = _split(renamed(load_events(limit=SLICE, disorder_minutes=5), suffix),
                           int(CUT.value // 10**6))
    took = {}
    t0 = time.monotonic()

    # Part one, processed to its end: the spanning streaks are half-matched in the state store.
    publish(settings, first)
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    wm1 = pd.Timestamp(results["delay_streaks"].watermark).tz_convert("UTC")
    spanning = expected[expected.tailnum.isin(SPANNING)]
    assert len(spanning) == 2
    for r in spanning.itertuples():  # what makes this a mid-match restart (the data, checked)
        assert r.first_event_time <= wm1 and r.last_event_time >= CUT, r
    state_rows = results["delay_streaks"].state_rows
    assert state_rows > 0  # pending events and partial matches
    assert_streaks_equal(table(settings, "delay_streaks"), expected[expected.last_event_time <= wm1])
    took["part one"], t0 = time.monotonic() - t0, time.monotonic()

    # Part two arrives while both run continuously; both stop mid-stream, once the pattern has
    # read some of it (a micro-batch with input rows).
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, ASSETS, Registry(settings))
    silver = start_query(spark, catalog["flights"], versions["flights"], settings, "continuous")
    cep = start_query(spark, catalog["delay_streaks"], versions["delay_streaks"], settings, "continuous")
    producer = threading.Thread(target=publish, args=(settings, second), kwargs={"rate": 2_000})
    producer.start()
    try:
        deadline = time.monotonic() + 300
        while not any(p["numInputRows"] for p in cep.query.recentProgress):
            assert time.monotonic() < deadline, "the pattern query read nothing new"
            assert silver.query.isActive and cep.query.isActive, silver.query.exception() or cep.query.exception()
            time.sleep(0.2)
    finally:
        silver.query.stop()
        cep.query.stop()
        producer.join()
    stopped_at = (cep.query.lastProgress or {}).get("eventTime", {}).get("watermark")
    partial = len(table(settings, "delay_streaks"))
    took["mid-stream"], t0 = time.monotonic() - t0, time.monotonic()

    # Restarted from the checkpoints: the matches of the rule, none twice.
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark, versions=versions)}
    v1 = table(settings, "delay_streaks")
    assert len(v1) >= 5
    assert_streaks_equal(v1, _emitted(expected, latest))
    assert set(SPANNING) <= set(v1.tailnum)
    assert results["delay_streaks"].dropped_by_watermark == 0 and results["delay_streaks"].late_events == 0
    took["restart"], t0 = time.monotonic() - t0, time.monotonic()

    # An uninterrupted run of the pattern over the same log: the replay into v2, gated, equals v1
    # row for row, and ends with as many state rows (the same pending events and partial matches).
    for asset in ASSETS:
        promote(settings, asset, 1, spark=spark)  # runs the gate: GX suite, late_rows, shadow_diff
    report = replay(settings, "delay_streaks", promote=True, spark=spark)
    assert report.versions == {"delay_streaks": 2} and report.passed
    checks = {c.name: c for c in report.gates["delay_streaks"].checks}
    assert checks["late_rows"].passed and checks["late_rows"].observed == 0
    assert checks["expect_compound_columns_to_be_unique__tailnum_first_event_time"].passed
    assert_streaks_equal(table(settings, "delay_streaks", 2), v1)  # row for row, arrays in order
    v2 = Registry(settings).version("delay_streaks", 2).last("caught_up")
    assert v2["state_rows"] == results["delay_streaks"].state_rows
    took["gates and replay"] = time.monotonic() - t0
    print(f"\npart one: watermark {wm1}, {state_rows} state rows; stopped mid-stream at watermark "
          f"{stopped_at} with {partial} matches written; {len(v1)} after the restart "
          f"({results['delay_streaks'].state_rows} state rows, as the replay's); seconds: "
          + ", ".join(f"{k} {v:.0f}" for k, v in took.items()))
