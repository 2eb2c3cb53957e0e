"""Nexmark events for Kappa: the pinned generator's output (crates.io ``nexmark`` 0.2.0, built by
``make install`` into ``build/nexmark``), turned into records of the three topics the declarations
in ``assets/nexmark/`` read, and published to Kafka.

The generator prints one JSON object per line, wrapped by type (``{"Bid": {...}}``), with
``date_time`` (and an auction's ``expires``) in epoch milliseconds. Each record Kappa publishes is
the unwrapped object with two changes the ``parse`` kind needs (:func:`record`):

* ``event_id``: the generator's event number (its line number from ``--offset``), the id silver
  deduplicates by: a bid has no id of its own.
* ``date_time`` and ``expires`` as ISO-8601 UTC text with milliseconds: Spark's JSON reader takes a
  number for a timestamp as epoch *seconds* (``JacksonParser``), which would put every event
  thousands of years ahead and quarantine it.

Keys: a person and an auction by ``id``, a bid by ``auction`` (``assets/nexmark/topics.yaml``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError

#: The crates.io version ``make install`` builds (Makefile ``NEXMARK_VERSION``).
GENERATOR_VERSION = "0.2.0"
#: The generator's wrapper name of each event type -> the topic it is published to.
TOPICS = {"Person": "nexmark_person", "Auction": "nexmark_auction", "Bid": "nexmark_bid"}
#: The field of each event type its record key is taken from.
KEY_FIELDS = {"Person": "id", "Auction": "id", "Bid": "auction"}
#: The fields held in epoch milliseconds that are published as ISO-8601 UTC text.
TIME_FIELDS = ("date_time", "expires")


class NexmarkError(KappaError, RuntimeError):
    """The generator is missing or failed."""


def generator_path(settings: Settings) -> Path:
    """The generator binary ``<project>/build/nexmark/bin/nexmark``. Raises :class:`NexmarkError`
    (one line, naming ``make install``) when it is not there."""
    path = settings.project_dir / "build" / "nexmark" / "bin" / "nexmark"
    if not path.is_file():
        raise NexmarkError(f"the Nexmark generator is not installed ({path}): run `make install` (needs cargo)")
    return path


def iso_ms(epoch_ms: int) -> str:
    """``1795977130841`` -> ``"2026-11-29T18:32:10.841+00:00"`` (UTC, milliseconds)."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def record(kind: str, event: dict, number: int) -> dict:
    """The record Kappa publishes for one generated event of ``kind`` (``Person``, ``Auction``,
    ``Bid``): ``event`` with ``event_id`` = ``number`` (the generator's event number) first and the
    :data:`TIME_FIELDS` as ISO-8601 text (see the module docstring)."""
    out = {"event_id": number, **event}
    for f in TIME_FIELDS:
        if f in out and out[f] is not None:
            out[f] = iso_ms(out[f])
    return out


@dataclass
class Events:
    """Generated events as records per topic: ``records[topic]`` is a list of dicts (:func:`record`),
    in generation order; ``count`` is how many events (all types)."""

    records: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TOPICS.values()})
    count: int = 0

    def kafka_records(self, topic: str) -> list[tuple[bytes, bytes, None]]:
        """``(key, value, None)`` for :func:`kappa.ingest.producer.produce`: the key is the
        :data:`KEY_FIELDS` value as text, the value the record's compact JSON."""
        kind = next(k for k, t in TOPICS.items() if t == topic)
        key = KEY_FIELDS[kind]
        return [(str(r[key]).encode(), json.dumps(r, separators=(",", ":")).encode(), None)
                for r in self.records[topic]]


def generate(settings: Settings, events: int, offset: int = 0) -> Events:
    """Run the generator for ``events`` events from event number ``offset`` (``-n events --offset
    offset --no-wait``: event times start at the wall clock and advance 0.1 ms per event, the
    generator's default 10,000 events/s) and return them as :class:`Events`. Raises
    :class:`NexmarkError` when the generator is missing or fails."""
    cmd = [str(generator_path(settings)), "-n", str(events), "--offset", str(offset), "--no-wait"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NexmarkError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    out = Events()
    for i, line in enumerate(proc.stdout.splitlines()):
        ((kind, event),) = json.loads(line).items()
        out.records[TOPICS[kind]].append(record(kind, event, offset + i))
        out.count += 1
    return out


def publish(settings: Settings, events: Events, topics: dict[str, str] | None = None,
            rate: float | None = None) -> dict[str, int]:
    """Publish ``events`` to their topics (``topics`` renames them: default topic -> topic name),
    creating each as ``assets_dir/topics.yaml`` declares it; ``rate``: at most that many records per
    second per topic (None: as fast as the broker takes them). Returns records published per topic."""
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics
    from kappa.spec import load_catalog

    names = topics or {t: t for t in TOPICS.values()}
    declared = load_catalog(settings.assets_dir).topics
    ensure_topics(settings, {names[t]: declared[names[t]] for t in TOPICS.values()})
    return {names[t]: produce(settings, names[t], events.kafka_records(t), rate=rate).records
            for t in TOPICS.values()}
