"""Archive health: whether a topic's archive (``assets/topics.yaml``: ``archive``, a ``raw`` asset's
Delta table, :mod:`kappa.delta.archive`) still holds everything the broker may delete.

Per partition of each archived topic, :func:`archive_health` compares the archive's highest
contiguous offset (every offset from 0 below it archived) with the log: the log start offset (below
it only the archive has the records) and the log end. The archive is **unhealthy** when

* the log starts above what the archive holds: records were deleted unarchived (a gap; a replay
  refuses, :func:`kappa.runners.versions.log_sources`), or
* its oldest unarchived record is older than half the topic's ``retention_ms`` (the broker's
  ``LogAppendTime``, read back with :func:`kappa.kafka.topics.records_at`): red well before
  retention could delete a record the archive has not read, while there is time to restart it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kappa.config import Settings
from kappa.delta.registry import Registry
from kappa.spec import Catalog

#: The share of a topic's retention after which an unarchived record turns the archive red.
RED_AT = 0.5


@dataclass(frozen=True)
class PartitionArchiveHealth:
    """One partition of an archived topic: the ``archive`` version (``asset/vN``; None: no version
    yet), ``log_start``/``log_end`` offsets, ``archived_to`` (the archive holds every offset below
    it but those ``kappa forget`` deleted), ``unarchived`` (records in the log above ``archived_to``), ``oldest_unarchived_s`` (age in
    seconds of the record at ``archived_to``, by the broker's clock; None when none is unarchived),
    ``retention_s`` (the topic's, seconds; None: forever), ``healthy`` and ``reason`` (empty when
    healthy)."""

    topic: str
    partition: int
    archive: str | None
    log_start: int
    log_end: int
    archived_to: int
    unarchived: int
    oldest_unarchived_s: float | None
    retention_s: float | None
    healthy: bool
    reason: str = ""


def archive_health(settings: Settings, catalog: Catalog, registry: Registry | None = None) -> list[PartitionArchiveHealth]:
    """:class:`PartitionArchiveHealth` of every partition of every topic of ``catalog`` that declares
    an archive (its promoted version, else its latest), topics by name, partitions by number; a
    topic that does not exist yet has none."""
    from kappa.delta.archive import archive_version, coverage
    from kappa.delta.forgotten import forgotten_offsets
    from kappa.kafka.topics import TopicError, offsets, records_at

    registry = registry or Registry(settings)
    out: list[PartitionArchiveHealth] = []
    for topic, spec in sorted(catalog.topics.items()):
        if spec.archive is None:
            continue
        kept = archive_version(registry, spec.archive)
        try:
            held = coverage(settings, kept.table_path, topic) if kept is not None else {}
        except Exception:  # TableNotFoundError: the archive has written nothing yet
            held = {}
        try:
            logs = offsets(settings, [topic])
        except TopicError:
            continue
        excused = forgotten_offsets(settings, topic)
        archived_to = {p.partition: held[p.partition].contiguous_end(excused.get(p.partition, set()))
                       if p.partition in held else 0 for p in logs}
        first = {(topic, p, to) for p, to in archived_to.items()}
        stamps = {(r.partition, r.offset): r.timestamp_ms for r in records_at(settings, sorted(first))}
        retention_s = spec.retention_ms / 1000 if spec.retention_ms >= 0 else None
        for p in logs:
            to = archived_to[p.partition]
            stamp = stamps.get((p.partition, to))
            age = None if stamp is None or to >= p.end else max(0.0, time.time() - stamp / 1000)
            reason = ""
            if to < p.start:
                reason = (f"offsets {to}-{p.start - 1} were deleted by the broker and are not archived: "
                          f"a replay cannot read them")
            elif age is not None and retention_s is not None and age > RED_AT * retention_s:
                reason = (f"the oldest unarchived record (offset {to}) is {age / 3600:.1f} h old; retention "
                          f"deletes it after {retention_s / 3600:.1f} h: is {spec.archive} running?")
            elif kept is None:
                reason = f"{spec.archive} has no version: `kappa run {spec.archive}` archives the topic"
            out.append(PartitionArchiveHealth(topic, p.partition, kept.name if kept else None, p.start, p.end, to,
                                              max(0, p.end - max(to, p.start)), age, retention_s,
                                              healthy=not reason, reason=reason))
    return out
