"""delay_streaks: complex event processing (a pattern per tailnum) on real Kafka, Spark and Delta,
checked against a plain-Python computation of the same rule (tests/integration/helpers.py)."""

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


from .helpers import assert_streaks_equal, expected_delay_streaks, ingest, renamed, table

pytestmark = pytest.mark.integration

SLICE = 20_000  # the first 20,000 flights (to 2013-01-24): 10 matches
ASSETS = ["flights", "delay_streaks"]


def _emitted(expected: pd.DataFrame, latest: pd.Timestamp) -> pd.DataFrame:
    """The matches a stream has written once it has read the whole log: those whose last departure
    is at or before the final watermark (latest event time - the asset's 2-hour delay); the others
    wait in state for later events."""
    return expected[expected.last_event_time <= latest - pd.Timedelta(hours=2)]


def test_slice_equals_the_independent_computation_and_a_replay_equals_v1(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=SLICE, disorder_minutes=5)
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    expected, latest = expected_delay_streaks(SLICE)
    v1 = table(settings, "delay_streaks")
    assert len(v1) >= 5
    assert_streaks_equal(v1, _emitted(expected, latest))
    assert results["delay_streaks"].dropped_by_watermark == 0 and results["delay_streaks"].late_events == 0

    for asset in ASSETS:
        promote(settings, asset, 1, spark=spark)  # runs the gate: GX suite, late_rows, shadow_diff
    report = replay(settings, "delay_streaks", promote=True, spark=spark)
    assert report.versions == {"delay_streaks": 2} and report.passed
    checks = {c.name: c for c in report.gates["delay_streaks"].checks}
    assert checks["late_rows"].passed and checks["late_rows"].observed == 0
    assert checks["expect_compound_columns_to_be_unique__tailnum_first_event_time"].passed
    assert_streaks_equal(table(settings, "delay_streaks", 2), v1)  # row for row, arrays in order


def _fast_trigger(name: str, doc: dict) -> None:
    doc["trigger"] = {"processing_time": "1 second"}


def _half(events, first: bool):
    def cut(seq):
        n = len(seq) // 2
        return seq[:n] if first else seq[n:]
    return [dataclasses.replace(e, keys=cut(e.keys), values=cut(e.values), timestamps_ms=cut(e.timestamps_ms))
            for e in events]


def test_stopping_mid_stream_and_restarting_from_the_checkpoint_gives_the_same_matches(make_env, spark):
    """Silver and the pattern run with a 1-second trigger while the second half of the slice
    arrives; both stop mid-stream (pending events and partial matches in the state store), and a
    restart from the checkpoints must end with exactly the matches of an uninterrupted run."""
    settings, suffix = make_env(edit=_fast_trigger)
    events = renamed(load_events(limit=SLICE, disorder_minutes=5), suffix)
    publish(settings, _half(events, True))
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, ASSETS, Registry(settings))
    silver = start_query(spark, catalog["flights"], versions["flights"], settings, "continuous")
    cep = start_query(spark, catalog["delay_streaks"], versions["delay_streaks"], settings, "continuous")
    producer = threading.Thread(target=publish, args=(settings, _half(events, False)), kwargs={"rate": 2_000})
    try:
        deadline = time.monotonic() + 300
        while not any(p["numInputRows"] for p in cep.query.recentProgress):  # the pattern has state
            assert time.monotonic() < deadline, "the pattern query made no progress"
            assert silver.query.isActive and cep.query.isActive, silver.query.exception() or cep.query.exception()
            time.sleep(0.2)
        producer.start()
        time.sleep(4)  # a few micro-batches of live data
    finally:
        silver.query.stop()  # mid-stream: events are still arriving
        cep.query.stop()
    producer.join()
    stopped_at = (cep.query.lastProgress or {}).get("eventTime", {}).get("watermark")
    partial = len(table(settings, "delay_streaks"))

    run_until_caught_up(settings, ASSETS, spark=spark, versions=versions)
    expected, latest = expected_delay_streaks(SLICE)
    assert_streaks_equal(table(settings, "delay_streaks"), _emitted(expected, latest))
    print(f"stopped at watermark {stopped_at} with {partial} matches written")
