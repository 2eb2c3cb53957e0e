"""Freshness's seconds behind: one clock compared with itself. A record's event time is the field
its topic's silver declares; when any record read cannot give one (a bad record, a topic no silver
reads), every record is measured by its broker timestamp instead of mixing 2013's event times with
today's broker clock."""

from __future__ import annotations

import json

from kappa.kafka.topics import Record
from kappa.quality.freshness import _event_time_ms


def _record(value: bytes | None, ts_ms: int = 1_764_000_000_000) -> Record:
    return Record("flights", 0, 7, b"k", value, ts_ms)


def test_a_records_event_time_is_its_declared_field_in_epoch_ms():
    good = _record(json.dumps({"event_time": "2013-01-05T06:00:00Z"}).encode())
    assert _event_time_ms(good, "event_time") == 1_357_365_600_000
    naive = _record(json.dumps({"event_time": "2013-01-05T06:00:00"}).encode())  # no zone: UTC
    assert _event_time_ms(naive, "event_time") == 1_357_365_600_000


def test_no_event_time_is_none_so_the_caller_falls_back_to_the_broker_clock_for_all():
    assert _event_time_ms(_record(json.dumps({"event_time": "soon"}).encode()), "event_time") is None
    assert _event_time_ms(_record(b"{not json"), "event_time") is None
    assert _event_time_ms(_record(b"[1, 2]"), "event_time") is None
    assert _event_time_ms(_record(None), "event_time") is None
    assert _event_time_ms(_record(json.dumps({"at": "2013-01-05T06:00:00Z"}).encode()), None) is None
