"""Restarting from checkpoints mid-stream: nothing duplicated, nothing lost."""

from __future__ import annotations

import dataclasses
import threading
import time

import pandas as pd
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import Registry, late_events_path
from kappa.harness.truth import expected_departures_hourly
from kappa.ingest.nycflights13 import load_events, publish
from kappa.runners import run_until_caught_up
from kappa.runners.versions import resolve_versions
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from .helpers import assert_departures_equal, renamed, table

pytestmark = pytest.mark.integration

SLICE = 20_000


def _fast_trigger(name: str, doc: dict) -> None:
    doc["trigger"] = {"processing_time": "1 second"}


def test_stopping_queries_mid_stream_and_restarting_from_checkpoints_changes_nothing(make_env, spark):
    """Events arrive live (rate-limited, in event-time order) while silver and gold run with a
    1-second trigger; both are stopped mid-stream, more events arrive, and a restart from the
    checkpoints must end with exactly the input: no duplicates, nothing lost, gold exact."""
    settings, suffix = make_env(edit=_fast_trigger)
    events = renamed(load_events(limit=SLICE), suffix)
    first = [dataclasses.replace(e, keys=e.keys[: len(e) // 2], values=e.values[: len(e) // 2],
                                 timestamps_ms=e.timestamps_ms[: len(e) // 2]) for e in events]
    second = [dataclasses.replace(e, keys=e.keys[len(e) // 2:], values=e.values[len(e) // 2:],
                                  timestamps_ms=e.timestamps_ms[len(e) // 2:]) for e in events]
    publish(settings, first)
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, ["flights", "departures_hourly"], Registry(settings))
    silver = start_query(spark, catalog["flights"], versions["flights"], settings, "continuous")
    gold = start_query(spark, catalog["departures_hourly"], versions["departures_hourly"], settings, "continuous")
    producer = threading.Thread(target=publish, args=(settings, second), kwargs={"rate": 1_500})
    try:
        deadline = time.monotonic() + 180
        while (silver.query.lastProgress or {}).get("batchId", -1) < 1:  # caught up with the first half
            assert time.monotonic() < deadline, "silver made no progress"
            assert silver.query.isActive, silver.query.exception()
            time.sleep(0.2)
        producer.start()
        time.sleep(4)  # a few micro-batches of live data
    finally:
        silver.query.stop()  # mid-stream: events are still arriving
        gold.query.stop()
    partial = table(settings, "flights")
    producer.join()
    assert SLICE // 2 <= len(partial) < SLICE

    results = run_until_caught_up(settings, ["flights", "departures_hourly"], spark=spark, versions=versions)

    # Every event is in exactly one place: silver, or, if it arrived behind silver's 2-hour watermark,
    # the late-events table (events published in event-time order still reach the partitions
    # unevenly: each partition's producer batch is sent on its own, so a partition can lag the
    # others by more than the watermark's delay while data arrives live).
    flights = table(settings, "flights")
    late = DeltaTable(str(late_events_path(settings))).to_pandas()
    late = late[late["asset"] == "flights"]
    assert (pd.to_datetime(late["event_time"], utc=True) < pd.to_datetime(late["watermark"], utc=True)).all()
    published = [i for e in events if e.topic.startswith("flights") for i in e.event_ids]
    placed = list(flights["event_id"]) + list(late["event_id"])
    assert len(placed) == len(published) == SLICE and set(placed) == set(published)
    # gold exactly equals the aggregation of what silver holds
    assert_departures_equal(table(settings, "departures_hourly"), expected_departures_hourly(flights=flights))
    assert all(r.dropped_by_watermark == 0 for r in results)
