"""Topic administration and offsets, through confluent-kafka's AdminClient and Consumer.

Offsets follow Kafka's meaning: per partition, the *log start offset* is the earliest offset still
retained, the *log end offset* is the offset the next record will get.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kappa.config import Settings
from kappa.errors import KappaError
from kappa.core.logs import LIBRDKAFKA
from kappa.spec import TopicSpec


class TopicError(KappaError, RuntimeError):
    """A topic cannot be created, described or read."""


@dataclass(frozen=True)
class PartitionOffsets:
    """The retained range of one partition, as offsets (module docstring): ``end - start`` records
    are retained (fewer on a compacted topic, which leaves gaps)."""

    topic: str
    partition: int
    start: int  # log start offset (earliest retained)
    end: int  # log end offset (next offset to be written)


def admin(settings: Settings) -> AdminClient:
    """A confluent-kafka ``AdminClient`` for ``settings``' broker, with its security settings
    (:meth:`kappa.config.Settings.librdkafka_options`); librdkafka's log goes to Kappa's log file
    (:data:`kappa.core.logs.LIBRDKAFKA`). It connects lazily: nothing is raised here for a broker
    that does not answer; its calls time out instead."""
    return AdminClient({"bootstrap.servers": settings.bootstrap_servers, **settings.librdkafka_options(),
                        "logger": LIBRDKAFKA})


#: The topic configs Kappa keeps on a topic that already exists: what the log's exactly-once
#: depends on (the broker's clock on every record: ``TopicSpec.kafka_config``). Retention, cleanup
#: policy and size limits stay as the topic's owner set them.
ENFORCED_CONFIGS = ("message.timestamp.type",)


def ensure_topics(settings: Settings, topics: dict[str, TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create every topic in ``topics`` that does not exist yet, with its partitions and configs
    (retention, cleanup policy, timestamp type). Returns the names created. An existing topic
    keeps its partitions and configs, except :data:`ENFORCED_CONFIGS`, which are set to the spec's
    value when they differ (a topic created before Kappa stamped records with the broker's clock).
    Raises :class:`TopicError` naming the topic when the broker refuses."""
    client = admin(settings)
    existing = set(client.list_topics(timeout=timeout_s).topics)
    new = [
        NewTopic(name, num_partitions=spec.partitions, replication_factor=1, config=spec.kafka_config())
        for name, spec in topics.items()
        if name not in existing
    ]
    kept = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics if name in existing]
    if kept:
        for resource, fut in client.describe_configs(kept, request_timeout=timeout_s).items():
            try:
                have = fut.result()
            except KafkaException as exc:
                raise TopicError(f"cannot describe topic {resource.name!r}: {exc}") from None
            want = topics[resource.name].kafka_config()
            drift = {k: want[k] for k in ENFORCED_CONFIGS if k not in have or have[k].value != want[k]}
            if drift:
                alter_topic_config(settings, resource.name, drift)
    if not new:
        return []
    _wait_for(client.create_topics(new, operation_timeout=timeout_s), "create", "TOPIC_ALREADY_EXISTS")
    return [t.topic for t in new]


def delete_topics(settings: Settings, names: list[str], timeout_s: float = 30.0) -> None:
    """Delete the topics ``names`` (broker-side operation timeout ``timeout_s`` seconds); a topic
    that does not exist is not an error. Raises :class:`TopicError` for any other refusal."""
    _wait_for(admin(settings).delete_topics(names, operation_timeout=timeout_s), "delete", "UNKNOWN_TOPIC")


def _wait_for(futures: dict, action: str, already_done: str) -> None:
    """Wait for every topic's AdminClient future; a refusal whose Kafka error code is
    ``already_done`` (the topic already exists / is already gone) counts as done. Raises
    :class:`TopicError` naming the topic otherwise."""
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            if already_done not in str(exc):
                raise TopicError(f"cannot {action} topic {name!r}: {exc}") from None


def alter_topic_config(settings: Settings, topic: str, config: dict[str, str]) -> None:
    """Set topic-level configs (incremental; other configs keep their values). Raises
    :class:`TopicError` naming the topic when the broker refuses."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()],
    )
    client = admin(settings)  # keep the client alive until the futures resolve
    for fut in client.incremental_alter_configs([resource]).values():
        try:
            fut.result()
        except KafkaException as exc:
            raise TopicError(f"cannot set {config} on topic {topic!r}: {exc}") from None


def delete_records_before(settings: Settings, topic: str, before: dict[int, int], timeout_s: float = 30.0) -> None:
    """Delete the records of ``topic`` below offset ``before[partition]`` in each partition (Kafka's
    DeleteRecords: the log start offset moves up; Kafka refuses it on a compacted topic). Raises
    :class:`TopicError` when the broker refuses."""
    client = admin(settings)  # keep the client alive until the futures resolve
    parts = [TopicPartition(topic, p, off) for p, off in before.items()]
    for tp, fut in client.delete_records(parts, request_timeout=timeout_s, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=2 * timeout_s)
        except KafkaException as exc:
            raise TopicError(f"cannot delete records of {topic}[{tp.partition}] below offset {tp.offset}: {exc}") from None


def offsets(settings: Settings, topics: list[str], timeout_s: float = 30.0) -> list[PartitionOffsets]:
    """Log start and end offsets of every partition of ``topics``.

    Raises :class:`TopicError` for a topic that does not exist."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "kappa-offsets",
                         "enable.auto.commit": False, **settings.librdkafka_options(), "logger": LIBRDKAFKA})
    try:
        meta = consumer.list_topics(timeout=timeout_s)
        out: list[PartitionOffsets] = []
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None:
                raise TopicError(f"topic {topic!r} does not exist at {settings.bootstrap_servers}")
            for p in sorted(tmeta.partitions):
                low, high = _watermarks(consumer, TopicPartition(topic, p), timeout_s)
                out.append(PartitionOffsets(topic, p, low, high))
        return out
    finally:
        consumer.close()


_LEADER_LAG = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """``get_watermark_offsets``, retried while the broker answers with a retriable error: a topic
    created a moment ago has no partition leader yet (NOT_LEADER_FOR_PARTITION,
    LEADER_NOT_AVAILABLE), which Kafka's clients treat as retriable metadata lag."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (err.retriable() or err.code() in _LEADER_LAG)
            if not retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def records_present(settings: Settings, topic: str, timeout_s: float = 60.0) -> dict[int, tuple[int, int, int]]:
    """partition -> (log start offset, log end offset, records actually present) of ``topic``, read
    from start to end. On a compacted topic fewer records than ``end - start`` means compaction
    removed some (Kafka docs, "Log Compaction": the offsets of removed records stay unused)."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "kappa-compaction-check",
                         "enable.auto.commit": False, "enable.partition.eof": True, **settings.librdkafka_options(),
                         "logger": LIBRDKAFKA})
    try:
        out: dict[int, tuple[int, int, int]] = {}
        for p in offsets(settings, [topic], timeout_s):
            if p.end <= p.start:
                out[p.partition] = (p.start, p.end, 0)
                continue
            consumer.assign([TopicPartition(topic, p.partition, p.start)])
            seen, last = 0, p.start - 1
            while last < p.end - 1:
                # poll, not consume(n): consume waits for n messages or its whole timeout, and a
                # compacted log has fewer records than offsets.
                m = consumer.poll(timeout_s)
                if m is None:
                    raise TopicError(f"{topic}[{p.partition}]: no records after offset {last} within {timeout_s:.0f} s")
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF: the end, below a trailing gap
                        last = p.end - 1
                    continue
                seen += 1
                last = m.offset()
            out[p.partition] = (p.start, p.end, seen)
        return out
    finally:
        consumer.close()


@dataclass(frozen=True)
class Record:
    """One record read back from the log: its coordinates, ``key``/``value`` bytes (None for a null
    key or value) and ``timestamp_ms`` (the broker's or producer's, per the topic's timestamp type)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


#: :func:`records_at` reads through a gap between two wanted offsets shorter than this, and seeks past a longer one.
READ_THROUGH = 1_000


def records_at(settings: Settings, coordinates: list[tuple[str, int, int]], timeout_s: float = 30.0) -> list[Record]:
    """The records at ``coordinates`` (topic, partition, offset) still in the log, in the order
    given; a record below its partition's log start offset (retention, a deleted prefix) or
    removed by compaction is left out. Offsets less than :data:`READ_THROUGH` apart are read in one
    pass from the first to the last; a larger gap is skipped by a seek, so the cost is the
    records asked for plus the short gaps between them."""
    wanted: dict[tuple[str, int], set[int]] = {}
    for topic, partition, offset in coordinates:
        wanted.setdefault((topic, int(partition)), set()).add(int(offset))
    ends = {(p.topic, p.partition): p for p in offsets(settings, sorted({t for t, _ in wanted}), timeout_s)}
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "kappa-records-at",
                         "enable.auto.commit": False, "enable.partition.eof": True, **settings.librdkafka_options(),
                         "logger": LIBRDKAFKA})
    found: dict[tuple[str, int, int], Record] = {}
    try:
        for (topic, partition), offs in sorted(wanted.items()):
            log = ends.get((topic, partition))
            offs = sorted(o for o in offs if log is not None and log.start <= o < log.end)
            runs: list[list[int]] = []
            for o in offs:
                if runs and o - runs[-1][-1] < READ_THROUGH:
                    runs[-1].append(o)
                else:
                    runs.append([o])
            for run in runs:
                want, last = set(run), run[-1]
                consumer.assign([TopicPartition(topic, partition, run[0])])
                while True:
                    m = consumer.poll(timeout_s)
                    if m is None:
                        raise TopicError(f"{topic}[{partition}]: no record within {timeout_s:.0f} s reading up to "
                                         f"offset {last}")
                    if m.error():
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            break
                        continue
                    if m.offset() in want:
                        found[(topic, partition, m.offset())] = Record(topic, partition, m.offset(), m.key(),
                                                                       m.value(), m.timestamp()[1])
                    if m.offset() >= last:
                        break
    finally:
        consumer.close()
    return [found[(t, int(p), int(o))] for t, p, o in coordinates if (t, int(p), int(o)) in found]


def log_end_offsets(settings: Settings, topics: list[str], timeout_s: float = 30.0) -> dict[str, dict[str, int]]:
    """topic -> partition (a string, as Spark's checkpoints write it) -> log end offset, now; a
    topic that does not exist maps to ``{}``."""
    out: dict[str, dict[str, int]] = {}
    for topic in topics:
        try:
            out[topic] = {str(p.partition): p.end for p in offsets(settings, [topic], timeout_s=timeout_s)}
        except TopicError:
            out[topic] = {}
    return out


def start_offsets(settings: Settings, topics: list[str]) -> dict[str, dict[str, int]]:
    """topic -> partition -> log start offset: where a new version starts reading ({} without
    topics, or for a topic that does not exist yet: it starts at 0)."""
    out: dict[str, dict[str, int]] = {}
    for topic in topics:
        try:
            out[topic] = {str(p.partition): p.start for p in offsets(settings, [topic])}
        except TopicError:
            out[topic] = {}
    return out
