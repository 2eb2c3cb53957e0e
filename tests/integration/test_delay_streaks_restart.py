"""delay_streaks: stopped mid-stream, restarted from its checkpoint (state and timers included)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from kappa.delta.registry import Registry
from kappa.ingest.nycflights13 import load_events, publish
from kappa.runners.local import resolve_versions, run_until_caught_up
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from .helpers import assert_streaks_equal, expected_delay_streaks, renamed, table
from .test_delay_streaks import ASSETS, SLICE, _emitted

pytestmark = pytest.mark.integration


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
