"""What `kappa ingest` promises about the log, read back with a plain consumer (no Spark): one key's
events sit in one partition in the order produced, and killing the broker during an ingest leaves
no duplicate ``event_id`` (the idempotent producer, KIP-98, on topics stamped with the broker's
clock: ``TopicSpec.kafka_config``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
from ..kappa_cli import clean_env

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


def append_span(settings, topic: str) -> tuple[int, int]:
    """The first and last broker append time (epoch ms) of ``topic``'s records: Kappa's topics are
    ``LogAppendTime``, so a record's timestamp is when the broker appended it."""
    ends = {p.partition: p.end for p in offsets(settings, [topic])}
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"span-{os.getpid()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    times: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(times) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(times)} of {sum(ends.values())} records"
            # consume() waits its whole timeout unless num_messages arrive: keep the wait short.
            msgs = consumer.consume(num_messages=10_000, timeout=0.5)
            times += [m.timestamp()[1] for m in msgs if m.error() is None]
    finally:
        consumer.close()
    return min(times), max(times)


def test_the_topics_publish_at_once_each_at_its_share_of_the_rate(make_env):
    """``--rate R`` is R events/s over all topics: every topic publishes at once, at its share of R
    (3,000 flights and 3,000 weather rows at 3,000 ev/s: 1,500 ev/s each, about 2 s together).
    Published one after the other, each at its share, two topics took twice as long."""
    settings, suffix = make_env()
    events = renamed(load_events(limit=3_000), suffix)
    reports = publish(settings, events, rate=3_000)
    assert [r.records for r in reports] == [3_000, 3_000]
    (a0, a1), (b0, b1) = (append_span(settings, e.topic) for e in events)
    assert b0 < a1 and a0 < b1, (f"{events[0].topic} was appended in [{a0}, {a1}] ms and {events[1].topic} in "
                                 f"[{b0}, {b1}] ms: published one after the other, not at once")


class Interrupted(Exception):
    """Raised in the main thread by the test's signal, as Ctrl-C raises KeyboardInterrupt."""


def test_an_interrupted_publish_stops_every_topic(make_env):
    """Ctrl-C in the middle of a throttled ingest stops it at once: the topics' threads hand over
    no more records (what they handed is delivered), instead of publishing the rest of the data
    set before the pool lets the interrupt through. 10,000 + 10,000 events at 4,000 ev/s take about
    5 s; interrupted after 1 s (SIGUSR1 with a handler that raises, as SIGINT raises
    KeyboardInterrupt), the call ends well before that and each topic holds part of its events."""
    import signal
    import threading

    settings, suffix = make_env()
    events = renamed(load_events(limit=10_000), suffix)

    def interrupt(_signum, _frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(Interrupted):
            publish(settings, events, rate=4_000)
        elapsed = time.monotonic() - started
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    logged = {e.topic: sum(p.end for p in offsets(settings, [e.topic])) for e in events}
    assert elapsed < 3.5, f"the publish went on for {elapsed:.1f} s after the interrupt at 1 s"
    assert all(0 < n < 10_000 for n in logged.values()), logged


def test_an_existing_topic_is_switched_to_the_brokers_clock_and_keeps_its_other_configs(make_env):
    """A topic created before Kappa stamped records with the broker's clock (Kafka's default,
    CreateTime, and a retention of its owner's choosing): ensure_topics sets LogAppendTime on it
    and leaves the retention alone."""
    from confluent_kafka.admin import ConfigResource, NewTopic

    from kappa.kafka.topics import admin, ensure_topics
    from kappa.spec import load_catalog

    settings, suffix = make_env()
    topic = f"flights_{suffix}"
    client = admin(settings)
    for fut in client.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "86400000"})]).values():
        fut.result()

    def config() -> dict[str, str]:
        from confluent_kafka import KafkaException

        for _ in range(50):  # a topic created a moment ago is not described until its metadata spreads
            (fut,) = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
            try:
                return {k: e.value for k, e in fut.result().items()}
            except KafkaException as exc:
                if "UNKNOWN_TOPIC" not in str(exc):
                    raise
                time.sleep(0.2)
        raise AssertionError(f"topic {topic} was never described")

    assert config()["message.timestamp.type"] == "CreateTime"
    assert ensure_topics(settings, {topic: load_catalog(settings.assets_dir).topics[topic]}) == []
    after = config()
    assert after["message.timestamp.type"] == "LogAppendTime"
    assert after["retention.ms"] == "86400000" and after["cleanup.policy"] == "delete"


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


class ResentBatch:
    """One idempotent-producer batch built by hand (kafka-python's protocol classes), so it can be
    sent again byte for byte, as a producer re-sends a batch whose acknowledgement was lost: ten
    records with event-time timestamps from 2013, producer id and epoch from InitProducerId,
    sequence numbers 0-9. :meth:`send` returns the base offset the broker reports: the batch's own
    offset when it recognises a re-sent batch (KIP-98), a new one when it appends it again."""

    def __init__(self, settings, topic: str):
        from kafka.protocol.producer import InitProducerIdRequest
        from kafka.record.default_records import DefaultRecordBatchBuilder

        self.settings, self.topic = settings, topic
        init = self._until_ok(lambda: InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                            version=1), lambda r: r.error_code)
        batch = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                          producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                          base_sequence=0, batch_size=1 << 20)
        for i in range(10):
            batch.append(i, timestamp=1_357_000_000_000 + i, key=b"k", value=b"v%d" % i, headers=[])
        self.records = bytes(batch.build())

    def _until_ok(self, request, error):
        """Send ``request()`` until ``error(response)`` is 0 (a fresh broker answers "coordinator
        loading" or "not leader" for a few seconds)."""
        from kafka.net.compat import KafkaNetClient

        client = KafkaNetClient(bootstrap_servers=self.settings.bootstrap_servers)
        try:
            node = client.least_loaded_node(bootstrap_fallback=True)
            for _ in range(100):
                response = client.send_and_receive(node, request(), timeout_ms=30_000)
                if error(response) == 0:
                    return response
                time.sleep(0.3)
            raise AssertionError(f"the broker kept refusing: {response}")
        finally:
            client.close()

    def send(self) -> int:
        from kafka.protocol.producer import ProduceRequest

        def request():
            data = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=self.records)
            return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, version=8,
                                  topic_data=[ProduceRequest.TopicProduceData(name=self.topic, partition_data=[data])])

        part = self._until_ok(request, lambda r: r.responses[0].partition_responses[0].error_code)
        return part.responses[0].partition_responses[0].base_offset


@pytest.mark.broker
def test_killing_the_broker_during_ingest_duplicates_no_event(tmp_path):
    """A private broker (the shared one must not die), killed with SIGKILL while `kappa ingest` is
    publishing, then restarted: the ingest finishes and the log holds each event_id once.

    The kill lands between a write and its acknowledgement only now and then, so the same kill is
    also aimed at that moment deterministically: one batch written before it and re-sent after it,
    byte for byte, to a topic with Kappa's topic configs (recognised: no second copy) and, as the
    control, to one with Kafka's default CreateTime (appended again: the broker forgot the
    producer, whose last timestamp is from 2013; this is what duplicated events in the ingest)."""
    from confluent_kafka.admin import NewTopic

    from kappa.kafka.topics import admin
    from kappa.spec.catalog import TopicSpec

    client = _stable_port()
    settings = load_settings(project_dir=REPO, home=tmp_path / "home",
                             kafka_port=client, kafka_controller_port=_stable_port({client}))
    broker.start(settings, timeout_s=180)
    topic_admin = admin(settings)
    probes = {"resent-kappa": TopicSpec(partitions=1).kafka_config(), "resent-createtime": {}}
    for fut in topic_admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in probes.items()]).values():
        fut.result()
    resent = {t: ResentBatch(settings, t) for t in probes}
    assert {t: b.send() for t, b in resent.items()} == {t: 0 for t in probes}
    env = clean_env()
    env.update({"KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(settings.home),
                "KAPPA_KAFKA_PORT": str(settings.kafka_port),
                "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port), "COLUMNS": "200"})
    limit, rate = 20_000, 2_000  # about 10 s of publishing per topic share
    ingest = subprocess.Popen([KAPPA, "ingest", "nycflights13", "--limit", str(limit), "--rate", str(rate)],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        topic = "flights"  # a private broker: the real topic names
        # Kill once the ingest is well under way (records in the log), not after a fixed sleep.
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
        assert resent["resent-kappa"].send() == 0, "the broker appended a re-sent batch again on Kappa's topic"
        assert resent["resent-createtime"].send() == 10, (
            "control: on a CreateTime topic the broker no longer forgets a producer whose records are old; "
            "if Kafka changed this, LogAppendTime is no longer what keeps the log free of duplicates")
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
