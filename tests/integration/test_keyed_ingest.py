"""What `kappa ingest` promises about the log, read back with a plain consumer (no Spark): one key's
events sit in one partition in the order produced, and killing the broker during an ingest leaves
no duplicate ``event_id`` (the idempotent producer, KIP-98)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kappa.config import load_settings
from kappa.core.processes import port_in_use
from kappa.ingest.nycflights13 import load_events, publish
from kappa.kafka import broker
from kappa.kafka.topics import offsets

from ..conftest import REPO
from .helpers import renamed

pytestmark = pytest.mark.integration

KAPPA = str(Path(sys.executable).parent / "kappa")


def read_log(settings, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of ``topic`` as (partition, offset, key, value), in offset order per partition."""
    ends = {p.partition: p.end for p in offsets(settings, [topic])}
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"readback-{os.getpid()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out, done = [], {p for p, end in ends.items() if end == 0}
    try:
        while len(done) < len(ends):
            msg = consumer.poll(10)
            assert msg is not None, "the log did not answer"
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
    finally:
        consumer.close()
    return out


def test_every_event_of_one_key_is_in_one_partition_in_the_order_produced(make_env):
    settings, suffix = make_env()
    flights = [e for e in renamed(load_events(limit=5_000), suffix) if e.topic.startswith("flights")][0]
    publish(settings, [flights])
    produced: dict[bytes, list[str]] = defaultdict(list)
    for key, eid in zip(flights.keys, flights.event_ids):
        produced[key].append(eid)
    logged: dict[bytes, list[str]] = defaultdict(list)
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for partition, _offset, key, value in read_log(settings, flights.topic):
        logged[key].append(json.loads(value)["event_id"])
        partitions[key].add(partition)
    assert len({p for ps in partitions.values() for p in ps}) == 3, "keys should spread over the 3 partitions"
    assert all(len(ps) == 1 for ps in partitions.values()), "a key's events landed in several partitions"
    assert logged == produced  # per key: same events, same order


def _stable_port(avoid: set[int] = frozenset()) -> int:
    """A free port below the ephemeral range (32768-60999 on Linux): while the broker is down, the
    producer's reconnects take ephemeral source ports and could take the broker's own port (a TCP
    self-connect), so the restarted broker could not bind it."""
    import random

    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 32_000)
        if port not in avoid and not port_in_use(port):
            return port


def test_killing_the_broker_during_ingest_duplicates_no_event(tmp_path):
    """A private broker (the shared one must not die), killed with SIGKILL while `kappa ingest` is
    publishing, then restarted: the ingest finishes and the log holds each event_id once."""
    client = _stable_port()
    settings = load_settings(project_dir=REPO, home=tmp_path / "home",
                             kafka_port=client, kafka_controller_port=_stable_port({client}))
    broker.start(settings, timeout_s=180)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env.update({"KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(settings.home),
                "KAPPA_KAFKA_PORT": str(settings.kafka_port),
                "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port), "COLUMNS": "200"})
    limit, rate = 20_000, 2_000  # about 10 s of publishing per topic share
    ingest = subprocess.Popen([KAPPA, "ingest", "nycflights13", "--limit", str(limit), "--rate", str(rate)],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        topic = "flights"  # a private broker: the real topic names
        # Kill once the ingest is well under way (records in the log), not after a fixed sleep.
        import time

        deadline = time.monotonic() + 180
        while True:
            assert ingest.poll() is None, "the ingest finished before the broker could be killed"
            try:
                if sum(p.end for p in offsets(settings, [topic], timeout_s=5)) >= 2_000:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the ingest made no progress"
            time.sleep(0.2)
        broker.kill(settings)
        # The killed broker's connections linger (FIN_WAIT) until the producer closes its side;
        # the port can be bound again once they are gone.
        deadline = time.monotonic() + 120
        while port_in_use(settings.kafka_port) or port_in_use(settings.kafka_controller_port):
            assert time.monotonic() < deadline, "the killed broker's ports were never released"
            time.sleep(0.2)
        broker.start(settings, timeout_s=180)
        out, _ = ingest.communicate(timeout=400)
        assert ingest.returncode == 0, out[-3000:]
        ids = [json.loads(v)["event_id"] for _p, _o, _k, v in read_log(settings, topic)]
        dupes = len(ids) - len(set(ids))
        assert dupes == 0, f"{dupes} duplicate event_ids in the log"
        assert len(set(ids)) == limit
    finally:
        if ingest.poll() is None:
            ingest.kill()
        try:
            broker.stop(settings, grace_s=20)
        except broker.BrokerError:
            pass
