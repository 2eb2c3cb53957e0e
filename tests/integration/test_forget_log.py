"""`kappa forget` on the log itself: a changelog topic (compacted) gets a tombstone for every
spelling of the key and loses the key's rows from its current-state and history tables; a
delete-retention topic with ``--truncate-log`` loses its prefix up to the key's last offset, and
replays then read that prefix from the topic's archive, without the key. Real broker, Spark and Delta; hand-made Debezium change events (no
PostgreSQL needed to write a changelog)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kappa.delta.registry import Registry
from kappa.delta.forgotten import requests
from kappa.lifecycle.forget import forget
from kappa.ingest.nycflights13 import load_events, publish
from kappa.ingest.producer import produce
from kappa.kafka.topics import ensure_topics, offsets
from kappa.lifecycle.promotion import replay
from kappa.runners import run_until_caught_up
from kappa.spec import load_catalog

from .helpers import files_holding, files_with_bytes, renamed, table

pytestmark = pytest.mark.integration

FORGOTTEN, KEPT = "NFORGET1", "NKEEP01"


def _change(tailnum: str, seats: int, op: str, lsn: int) -> bytes:
    image = {"tailnum": tailnum, "year": 2004, "type": "Fixed wing multi engine", "manufacturer": "EMBRAER",
             "model": "EMB-145XR", "engines": 2, "seats": seats, "speed": None, "engine": "Turbo-fan"}
    return json.dumps({"before": None, "after": image, "op": op,
                       "source": {"lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn}}).encode()


def _log(settings, topic: str) -> list[tuple[bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "t", "enable.auto.commit": False})
    end = offsets(settings, [topic])[0].end
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    while len(out) < end:
        m = c.poll(10)
        assert m is not None and not m.error(), m and m.error()
        out.append((m.key(), m.value()))
    c.close()
    return out


def test_forgetting_a_changelog_key_tombstones_every_spelling_and_empties_both_tables(make_env, spark):
    settings, suffix = make_env()
    topic = f"ops.public.planes_{suffix}"
    catalog = load_catalog(settings.assets_dir)
    ensure_topics(settings, {topic: catalog.topics[topic]})
    # Debezium writes compact JSON keys; a re-sent or hand-written change may be spaced: one key.
    records = [(b'{"tailnum":"%s"}' % t.encode(), _change(t, 50, "r", lsn), None)
               for lsn, t in enumerate([FORGOTTEN, KEPT], start=1)]
    records += [(b'{"tailnum": "%s"}' % FORGOTTEN.encode(), _change(FORGOTTEN, 55, "u", 10), None),
                (b'{"tailnum":"%s"}' % KEPT.encode(), _change(KEPT, 60, "u", 11), None)]
    produce(settings, topic, records)
    run_until_caught_up(settings, ["planes", "planes_history"], spark=spark)
    Registry(settings).promote({"planes": 1, "planes_history": 1})
    assert set(table(settings, "planes")["tailnum"]) == {FORGOTTEN, KEPT}
    assert files_holding(Path(settings.warehouse), FORGOTTEN.encode())

    report = forget(settings, topic, FORGOTTEN, "test: plane owner's request", spark=spark)
    steps = report.request.steps
    assert steps["located"]["records"] == 2
    assert steps["log"] == {"tombstones": 2}
    assert steps["deleted"]["rows"] == 1 + 2  # current state: 1 row; history: 2 versions
    assert files_holding(Path(settings.warehouse), FORGOTTEN.encode()) == []
    # A changelog's checkpoint holds Kafka offsets, commits and metadata: no key, so it stays.
    assert files_with_bytes([Path(settings.checkpoints)], [FORGOTTEN.encode(), KEPT.encode()]) == {}
    assert steps["checkpoints"] == {"checkpoints": {}, "stopped": []}
    assert set(table(settings, "planes")["tailnum"]) == {KEPT}
    history = table(settings, "planes_history")
    assert list(history["tailnum"]) == [KEPT] * 2 and history["is_current"].sum() == 1

    tail = _log(settings, topic)[-2:]  # the tombstones: each spelling of the key, null value
    assert sorted(k for k, _ in tail) == sorted([b'{"tailnum":"NFORGET1"}', b'{"tailnum": "NFORGET1"}'])
    assert all(v is None for _, v in tail)

    # A replay of the history reads the whole log (compaction has not run yet): the forgotten
    # list keeps the key out, however it is spelt.
    rep = replay(settings, "planes_history", promote=False, spark=spark)
    assert set(table(settings, "planes_history", rep.versions["planes_history"])["tailnum"]) == {KEPT}
    assert [r.state for r in requests(settings)] == ["done"]


def test_truncate_log_deletes_the_prefix_up_to_the_keys_last_offset_and_replays_read_the_archive_without_the_key(
        make_env, spark):
    settings, suffix = make_env()
    flights = [e for e in renamed(load_events(limit=600), suffix) if e.topic.startswith("flights")]
    publish(settings, flights)
    topic = flights[0].topic
    run_until_caught_up(settings, ["flights_bronze"], spark=spark)
    key = flights[0].keys[0].decode()
    ends = {p.partition: p.end for p in offsets(settings, [topic])}
    before = table(settings, "flights_bronze")
    held = before[before["key"].map(bytes) == key.encode()]
    key_offsets = {str(p): sorted(int(o) for o in g["offset"]) for p, g in held.groupby("partition")}

    started = time.monotonic()
    report = forget(settings, topic, key, "test: truncate", truncate_log=True, spark=spark)
    print(f"forget --truncate-log: {time.monotonic() - started:.1f} s")
    last = report.request.steps["located"]["last_offsets"]
    assert last and report.request.steps["log"]["truncated"] == {p: off + 1 for p, off in last.items()}
    starts = {p.partition: p.start for p in offsets(settings, [topic])}
    assert starts == {p: (last[str(p)] + 1 if str(p) in last else 0) for p in ends}
    assert {p.partition: p.end for p in offsets(settings, [topic])} == ends  # only the prefix went
    v1 = table(settings, "flights_bronze")
    assert (v1["key"].map(bytes) != key.encode()).all()
    # The archive (flights_bronze/v1 itself) lacks the forgotten records' offsets: forget deleted
    # them and recorded where they were, so the replay reads the prefix from it, without the key.
    assert requests(settings)[-1].steps["located"]["offsets"] == key_offsets and key_offsets
    report = replay(settings, "flights_bronze", spark=spark)
    created = Registry(settings).version("flights_bronze", 2).last("created")
    assert created["archive"][topic]["below"] == {str(p): s for p, s in starts.items() if s > 0}
    v2 = table(settings, "flights_bronze", 2)
    assert report.versions == {"flights_bronze": 2} and (v2["key"].map(bytes) != key.encode()).all()
    assert sorted(zip(v2["partition"], v2["offset"])) == sorted(zip(v1["partition"], v1["offset"]))
    assert len(v2) == sum(ends.values()) - len(held)
