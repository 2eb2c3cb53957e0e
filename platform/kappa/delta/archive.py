"""The log's archive: a ``raw`` (bronze) asset's Delta table holds every record of its topic as the
broker held it (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``), so a topic
may bound its retention (``assets/topics.yaml``: ``retention_ms`` with ``archive``) and a replay
still reads its whole log: offsets below the log start from the archive, the rest from Kafka
(:func:`kappa.runners.versions.log_sources`, :func:`kappa.streaming.sources.read_source`). The
shape of Fluss's and Paimon's "union read" of lake and log.

This module measures what an archive table holds (:func:`coverage`) and reads a version's record of
what it takes from the archive (:func:`archived_records`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kappa.config import Settings

#: At most this many missing ranges per partition are listed by :func:`coverage` (beyond them the
#: archive is treated as missing everything after the last one listed).
GAPS_LISTED = 10_000


@dataclass(frozen=True)
class Coverage:
    """What an archive table holds of one partition: ``first`` and ``last`` offset (None: no
    record), ``records`` (rows), and the missing ranges between them, each ``(from, to)``
    inclusive, lowest first (at most :data:`GAPS_LISTED`)."""

    partition: int
    first: int | None = None
    last: int | None = None
    records: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)

    def contiguous_end(self, excused: set[int] | frozenset[int] = frozenset()) -> int:
        """The first offset from 0 the archive lacks, not counting offsets in ``excused`` (records
        ``kappa forget`` deleted: :func:`kappa.delta.forgotten.forgotten_offsets`): every other
        offset below it is archived (0 when offset 0 itself is missing)."""
        if self.first is None:
            return 0
        start = self._first_missing(0, self.first - 1, excused)
        if start is not None:
            return start
        for lo, hi in self.gaps:
            missing = self._first_missing(lo, hi, excused)
            if missing is not None:
                return missing
        if len(self.gaps) >= GAPS_LISTED:
            return self.gaps[-1][1] + 1
        return self.last + 1

    @staticmethod
    def _first_missing(lo: int, hi: int, excused) -> int | None:
        for o in range(lo, hi + 1):
            if o not in excused:
                return o
        return None

    def missing_below(self, offset: int, excused: set[int] | frozenset[int] = frozenset()) -> tuple[int, int] | None:
        """The first missing range ``(from, to)`` (inclusive, up to ``offset - 1``) below ``offset``
        not excused (:meth:`contiguous_end`), None if the archive holds every other offset from 0
        to ``offset - 1``."""
        end = self.contiguous_end(excused)
        if end >= offset:
            return None
        if self.first is None or end < self.first:
            return end, min(self.first if self.first is not None else offset, offset) - 1
        to = next((hi for lo, hi in self.gaps if lo <= end <= hi), offset - 1)
        return end, min(to, offset - 1)


def archive_version(registry, asset: str):
    """The version of a topic's ``archive`` asset (``assets/topics.yaml``) that stands in for the log
    below its start: the promoted one, else the latest; None before it has any. A new version reads
    it (:func:`kappa.runners.versions.log_sources`), ``kappa forget`` deletes from it and ``kappa status`` checks
    it (:func:`kappa.quality.archive.archive_health`). ``registry``: a
    :class:`kappa.delta.registry.Registry`."""
    return registry.promoted(asset) or registry.latest(asset)


def coverage(settings: Settings, table_path: str, topic: str, version: int | None = None) -> dict[int, Coverage]:
    """partition -> :class:`Coverage` of ``topic``'s records in the archive table at ``table_path``
    (Delta version ``version``, default the latest), computed by DuckDB over the table's files
    (:func:`kappa.delta.tables.dataset`: the ``partition`` and ``offset`` columns only). A partition
    with no archived record is absent. Raises deltalake's ``TableNotFoundError`` without a table."""
    import duckdb
    import pyarrow.dataset as pds

    from kappa.delta.tables import dataset

    archive = dataset(table_path, settings, version)
    with duckdb.connect() as con:
        con.register("archive", archive.filter(pds.field("topic") == topic))
        summary = con.execute(
            'SELECT "partition", min("offset"), max("offset"), count(*) FROM archive GROUP BY 1').fetchall()
        gaps = con.execute(
            'SELECT p, prev + 1, o - 1 FROM (SELECT "partition" AS p, "offset" AS o, '
            'lag("offset") OVER (PARTITION BY "partition" ORDER BY "offset") AS prev FROM archive) '
            f'WHERE o - prev > 1 QUALIFY row_number() OVER (PARTITION BY p ORDER BY o) <= {GAPS_LISTED} '
            'ORDER BY p, o').fetchall()
    out = {int(p): Coverage(int(p), int(lo), int(hi), int(n)) for p, lo, hi, n in summary}
    for p, lo, hi in gaps:
        out[int(p)].gaps.append((int(lo), int(hi)))
    return out


def archived_records(created: dict | None) -> int:
    """How many records a version reads from archives: the sum, over the topics and partitions of
    its ``created`` registry event's ``archive`` entry (topic -> ``{"asset", "version", "table",
    "below": {partition: offset}}``), of the offsets below the log start it takes from there."""
    archive = (created or {}).get("archive") or {}
    return sum(int(o) for entry in archive.values() for o in (entry.get("below") or {}).values())
