"""Publishing events with an idempotent Kafka producer (``enable.idempotence=true``, ``acks=all``).

With idempotence the broker discards a retried batch it already wrote, so a network error or a
broker restart during ingest duplicates nothing in the log (Kafka's "idempotent producer", KIP-98),
as long as the broker still knows the producer and the producer keeps its epoch:

* the broker forgets a producer whose last batch timestamp is older than
  ``producer.id.expiration.ms`` (1 day), and after a restart it appends a re-sent batch of a
  producer it forgot again. Kappa's topics stamp records with the broker's clock
  (``message.timestamp.type=LogAppendTime``, :meth:`kappa.spec.catalog.TopicSpec.kafka_config`), so
  history with old event times does not look expired; the event time travels in the value;
* one request in flight per connection keeps librdkafka from bumping the epoch after a restart
  (see :func:`producer_config`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from confluent_kafka import KafkaError, Producer

from kappa.config import Settings
from kappa.errors import KappaError
from kappa.core.logs import LIBRDKAFKA


class IngestError(KappaError, RuntimeError):
    """Records could not be delivered; the message gives how many and the first error."""


@dataclass
class ProduceReport:
    """What one :func:`produce` call delivered: ``records`` acknowledged records to ``topic`` in
    ``seconds`` (monotonic clock, from the first send to the last acknowledgement), and how many
    went to each partition (partition -> records, partitions in order)."""

    topic: str
    records: int
    seconds: float
    per_partition: dict[int, int] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        """Delivered records per second over the call (``inf`` when it took no measurable time)."""
        return self.records / self.seconds if self.seconds > 0 else float("inf")


def producer_config(settings: Settings, **overrides: object) -> dict:
    """The librdkafka configuration of Kappa's producers (confluent-kafka ``Producer(config)``):
    the broker and its security settings, idempotence with ``acks=all``, batching (``linger.ms``
    20 ms, up to 10,000 messages, lz4), records up to 16 MiB (``message.max.bytes``, bytes),
    retries through a broker restart for up to 300 s (``message.timeout.ms``) and one request in
    flight (why: below). ``overrides`` replace any key (librdkafka's names, e.g.
    ``{"linger.ms": 0}``)."""
    cfg: dict = {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.librdkafka_options(),
        # librdkafka's warnings (a GETPID retry while a fresh broker loads its coordinator) go to
        # the log file, not between the progress bars (kappa.core.logs).
        "logger": LIBRDKAFKA,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 200_000,
        "message.max.bytes": 16 * 1024 * 1024,
        # Keep retrying through a broker restart (librdkafka retries idempotently until this expires).
        "message.timeout.ms": 300_000,
        # One request in flight per broker connection. With up to five, a request that fails on a
        # broker restart makes the next ones fail with OUT_OF_ORDER_SEQUENCE_NUMBER, librdkafka then
        # bumps the producer epoch and re-sends batches the broker may already have written, which
        # the broker cannot recognise under the new epoch: duplicates (librdkafka issue #4953; the
        # maintainers: the idempotent producer alone is not exactly-once across an epoch bump).
        # (The duplicates seen here after a SIGKILL of the broker, e.g. 629 event_ids, a re-sent
        # first batch, were the broker forgetting the producer: see the module docstring.) Cost
        # measured here: 84,000 vs 98,000 events/s on the full flights table to the local broker.
        "max.in.flight.requests.per.connection": 1,
    }
    cfg.update(overrides)
    return cfg


def produce(
    settings: Settings,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int | None]],
    *,
    rate: float | None = None,
    headers: Callable[[], list[tuple[str, bytes]]] | None = None,
    on_progress: Callable[[int], None] | None = None,
    producer: Producer | None = None,
) -> ProduceReport:
    """Publish ``(key, value, timestamp_ms)`` records to ``topic`` and wait for every delivery.

    ``rate`` throttles to at most that many records per second (None = as fast as possible);
    ``headers`` is called per record (e.g. to stamp the send time); ``on_progress(n)`` is called
    with the number of records handed over since the last call. Raises :class:`IngestError` when
    any record is not delivered.
    """
    own = producer is None
    producer = producer or Producer(producer_config(settings))
    per_partition: Counter[int] = Counter()
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            per_partition[msg.partition()] += 1

    start = time.monotonic()
    n = 0
    pending_progress = 0
    for key, value, ts in records:
        kwargs = {"key": key, "value": value, "on_delivery": delivered}
        if ts is not None:
            kwargs["timestamp"] = int(ts)
        if headers is not None:
            kwargs["headers"] = headers()
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.05)
        n += 1
        pending_progress += 1
        if n % 1000 == 0:
            producer.poll(0)
            if on_progress is not None:
                on_progress(pending_progress)
                pending_progress = 0
            if rate:
                ahead = start + n / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        elif rate and rate < 1000:
            ahead = start + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    flush_timeout_s = 300
    remaining = producer.flush(flush_timeout_s)
    if on_progress is not None and pending_progress:
        on_progress(pending_progress)
    elapsed = time.monotonic() - start
    if remaining:
        errors.append(KafkaError(KafkaError._MSG_TIMED_OUT, f"{remaining} records still queued after {flush_timeout_s} s"))
    if errors:
        raise IngestError(f"{len(errors)} record(s) to {topic!r} were not delivered; first error: {errors[0]}")
    if own:
        del producer
    return ProduceReport(topic=topic, records=n, seconds=elapsed, per_partition=dict(sorted(per_partition.items())))
