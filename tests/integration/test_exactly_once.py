"""Restarting from a checkpoint, and bad records: nothing duplicated, nothing lost."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from kappa.delta.registry import Registry
from kappa.ingest.events import nycflights13_events
from kappa.ingest.nycflights13 import load_events, publish
from kappa.ingest.producer import produce
from kappa.kafka.topics import ensure_topics
from kappa.runners.local import resolve_versions, run_until_caught_up
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from .helpers import assert_departures_equal, expected_departures_hourly, quarantine, renamed, table

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

    flights = table(settings, "flights")
    assert len(flights) == SLICE and flights["event_id"].is_unique
    assert_departures_equal(table(settings, "departures_hourly"), expected_departures_hourly(limit=SLICE))
    assert all(r.dropped_by_watermark == 0 for r in results)


def _bad_records(good_value: bytes) -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, expected reason fragment) for each kind of bad record."""
    doc = json.loads(good_value)
    wrong_double = dict(doc, dep_delay="late", event_id="bad-double")
    wrong_int = dict(doc, flight="UA-12", event_id="bad-int")
    missing = {k: v for k, v in doc.items() if k != "origin"} | {"event_id": "bad-missing"}
    null_required = dict(doc, carrier=None, event_id="bad-null")
    no_time = dict(doc, event_time="yesterday", event_id="bad-time")
    return [
        (b"k1", b"{not json", "malformed JSON"),
        (b"k2", json.dumps(wrong_double).encode(), "field 'dep_delay' is not a valid double: late"),
        (b"k3", json.dumps(wrong_int).encode(), "field 'flight' is not a valid int"),
        (b"k4", json.dumps(missing).encode(), "missing required field(s): origin"),
        (b"k5", json.dumps(null_required).encode(), "missing required field(s): carrier"),
        (b"k6", json.dumps(no_time).encode(), "field 'event_time' is not a valid timestamp"),
        (b"k7", b"", "empty value"),
        (b"k8", None, "null value"),
        (None, b'{"event_id": "\xff\xfe"}', "not valid UTF-8"),
        (b"k9", b"[1, 2, 3]", "not a JSON object"),
        (b"k10", b"42", "not a JSON object"),
    ]


def test_malformed_and_schema_violating_records_are_quarantined_and_nothing_is_lost(make_env, spark):
    settings, suffix = make_env()
    topic = f"flights_{suffix}"
    catalog = load_catalog(settings.assets_dir)
    ensure_topics(settings, {topic: catalog.topics[topic]})
    good = nycflights13_events("flights", limit=1_000)
    bad = _bad_records(good.values[0])
    records = list(zip(good.keys, good.values, good.timestamps_ms.tolist()))
    for i, (key, value, _) in enumerate(bad):  # interleave bad records with good ones
        records.insert(1 + i * 90, (key, value, None))
    produce(settings, topic, records)

    run_until_caught_up(settings, ["flights"], spark=spark)

    silver = table(settings, "flights")
    q = quarantine(settings)
    assert len(silver) + len(q) == len(records)  # clean + quarantine = input, exactly
    assert len(silver) == len(good) and silver["event_id"].is_unique
    assert set(q["asset"]) == {"flights"} and set(q["version"]) == {1}
    assert set(q["topic"]) == {topic}
    assert not q.duplicated(["partition", "offset"]).any()
    by_value = {(None if v is None else bytes(v)): r for v, r in zip(q["value"], q["reason"])}
    for key, value, reason in bad:
        assert value in by_value, f"record {value!r} was not quarantined"
        assert reason in by_value[value], f"{value!r}: {by_value[value]!r} lacks {reason!r}"
    null_key = q[q["key"].isna()]
    assert len(null_key) == 1 and bytes(null_key["value"].iloc[0]) == b'{"event_id": "\xff\xfe"}'

    # Restarting the caught-up query re-reads nothing and writes nothing twice.
    run_until_caught_up(settings, ["flights"], spark=spark)
    assert len(quarantine(settings)) == len(q)
    assert len(table(settings, "flights")) == len(silver)
