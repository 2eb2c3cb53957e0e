"""Provenance: which source offsets a Delta version of an asset's table covers.

Every commit a Kappa ``foreachBatch`` writer makes (:class:`kappa.streaming.writers.MicroBatchWriter`:
the parse, changelog, lookup, materialized-view, pattern, upsert and append writers, so every kind)
carries, in
``commitInfo.userMetadata`` (Delta protocol, "Commit Provenance Information"; Spark's
``userMetadata`` write option and ``spark.databricks.delta.commitInfo.userMetadata``; delta-rs
reads it in ``DeltaTable.history()``), the micro-batch id and what the batch read up to, from the
query's write-ahead log (:func:`kappa.streaming.checkpoint.batch_sources`)::

    {"kappa": 1, "asset": "flights", "version": 1, "batch_id": 7,
     "sources": [{"kafka": {"flights": {"0": 1200, "1": 1180, "2": 1175}}}]}

A Kafka source gives each partition's end offset (exclusive); a Delta source (an upstream asset)
``{"delta": {"asset", "version", "table_version", "complete", "position"}}``: the upstream version's
Delta version the batch read through (``complete`` false: part of it, a rate-limited batch) and
Delta's own end position (``reservoirVersion``, ``index``; Delta's ``DeltaSourceOffset``; with
``change_data_feed`` for a read of the upstream's change data feed, see :func:`read_through`); a
topic's archive, which a replay reads below the log start (:func:`describe_sources`),
``{"archive": {"asset", "version", "table_version", "complete", "position", "below"}}``.

Tables written before the append kinds (raw, sql, python, join, sliding and windows in append
mode) moved to :class:`kappa.streaming.writers.AppendWriter` hold commits of Delta's own streaming
sink, which cannot set per-batch metadata: they carry Delta's ``txn`` action (app id = the query
id, version = the batch id), and :func:`covered` reads the batch's write-ahead log entry, which the
checkpoint keeps for the last ``spark.sql.streaming.minBatchesToRetain`` (100) batches. Older
commits of that kind report ``recorded_in: None`` (not recorded), never a guess.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from kappa.config import Settings
from kappa.core.storage import delta_rs_uri, join, read_text
from kappa.delta.registry import Registry, Version
from kappa.delta.tables import is_table, open_table
from kappa.errors import KappaError


class ProvenanceError(KappaError, LookupError):
    """No such asset version or Delta version."""


@dataclass
class Coverage:
    """What the Delta version ``table_version`` of ``asset`` version ``version`` covers: the last
    micro-batch committed at or before it (``batch_id``) and its ``sources`` (see the module
    docstring); ``recorded_in``: ``commitInfo`` (the commit's metadata), ``checkpoint`` (Delta's
    streaming sink: the batch's write-ahead log entry) or None (nothing committed yet, or not
    recorded)."""

    asset: str
    version: int
    table_version: int | None
    commit_version: int | None = None
    batch_id: int | None = None
    sources: list[dict] = field(default_factory=list)
    recorded_in: str | None = None

    @property
    def offsets(self) -> dict[str, dict[str, int]]:
        """The Kafka sources' end offsets merged: topic -> partition -> offset (exclusive)."""
        out: dict[str, dict[str, int]] = {}
        for src in self.sources:
            for topic, parts in (src.get("kafka") or {}).items():
                out.setdefault(topic, {}).update(parts)
        return out

    def to_json(self) -> dict:
        """The coverage as plain JSON values, with :attr:`offsets`."""
        return {**asdict(self), "offsets": self.offsets}


def upstream_table_ids(settings: Settings, version: Version) -> dict[str, tuple[str, int, str]]:
    """Delta table id (``metaData.id``, Delta's ``reservoirId``) -> (upstream asset, version, table
    path) for every upstream version ``version`` is pinned to whose table exists."""
    ids = {}
    for name, number in version.upstream.items():
        path = version.upstream_table(name)
        table_id = _table_id(path, settings)
        if table_id is not None:
            ids[table_id] = (name, number, path)
    return ids


def archive_table_ids(settings: Settings, version: Version) -> dict[str, dict]:
    """Delta table id -> ``{"asset", "version", "below"}`` for each archive ``version`` reads the
    start of its topics from (its ``created`` event's ``archive``; ``below``: topic -> partition ->
    offset, exclusive); empty for a version that reads its topics from the log alone."""
    out: dict[str, dict] = {}
    for topic, entry in sorted(((version.last("created") or {}).get("archive") or {}).items()):
        table_id = _table_id(entry["table"], settings)
        if table_id is not None:
            held = out.setdefault(table_id, {"asset": entry["asset"], "version": entry["version"], "below": {}})
            held["below"][topic] = dict(entry["below"])
    return out


def describe_sources(settings: Settings, version: Version, sources: list[dict],
                     upstream_ids: dict[str, tuple[str, int, str]] | None = None,
                     change_feed: bool = False) -> list[dict]:
    """A write-ahead log entry's sources (:func:`kappa.streaming.checkpoint.batch_sources`) as
    provenance: Kafka offsets as they are, a Delta source named by the upstream asset version whose
    table it is (matched on the table id; ``upstream_ids`` from :func:`upstream_table_ids`, looked
    up when not given) with the Delta version it read through (:func:`read_through`).
    ``change_feed``: the Delta sources are reads of the upstreams' change data feeds (a
    ``materialized_view``), whose end position inside a version is read against the version's
    ``cdc`` actions in the upstream's log (:func:`change_files`).

    A version that reads part of its topics from their archive (its ``created`` event's
    ``archive``, :func:`kappa.runners.versions.log_sources`) has the archive's table as a Delta
    source before its Kafka source: it is described as ``{"archive": {"asset", "version",
    "table_version", "complete", "position", "below"}}``, ``below`` topic -> partition -> the
    offset (exclusive) below which the records came from the archive, the Kafka source's offsets
    starting there (:func:`archive_table_ids`)."""
    if not any("reservoirId" in s for s in sources):
        return [{"kafka": s} for s in sources]
    ids = upstream_ids if upstream_ids is not None else upstream_table_ids(settings, version)
    archives: dict[str, dict] | None = None
    out = []
    for src in sources:
        if "reservoirId" not in src:
            out.append({"kafka": src})
            continue
        v, i = src.get("reservoirVersion"), src.get("index", -1)
        starting = bool(src.get("isStartingVersion", False))
        position = {"reservoirVersion": v, "index": i}
        if src["reservoirId"] not in ids:
            archives = archive_table_ids(settings, version) if archives is None else archives
            if src["reservoirId"] in archives:
                through, complete = read_through(v, i, starting=starting)
                out.append({"archive": {**archives[src["reservoirId"]], "table_version": through,
                                        "complete": complete, "position": position}})
                continue
        name, n, path = ids.get(src["reservoirId"], (None, None, None))
        cdc = None
        if change_feed:
            position["change_data_feed"] = True
            if v is not None and i >= 0 and path is not None:
                cdc = change_files(path, v, settings)
        through, complete = read_through(v, i, starting=starting, change_files=cdc)
        out.append({"delta": {"asset": name, "version": n, "table_version": through, "complete": complete,
                              "position": position}})
    return out


def read_through(reservoir_version: int | None, index: int, starting: bool = False,
                 change_files: int | None = None) -> tuple[int | None, bool]:
    """(the Delta version a batch read through, complete) from a Delta source's end position
    (Delta's ``DeltaSourceOffset``: ``reservoirVersion`` v, ``index`` i, ``isStartingVersion``).

    Delta's source indexes each version's changes as a placeholder before them (index -1), its
    files (0, 1, ...) and a placeholder after them; the one after them is always admitted once the
    version's last file is, and turns the position into (v + 1, -1). So i = -1 is the start of v:
    the batch read all of v - 1 (``complete``); i >= 0 stopped inside v after its file i (a batch
    cut by ``maxFilesPerTrigger``/``maxBytesPerTrigger``: ``complete`` False), with one exception.
    A read of the change data feed (``readChangeFeed``) indexes a version whose commit wrote
    ``cdc`` files (an update or delete of a MERGE) as those files alone, 0 .. k - 1, with no
    placeholder after them, and admits such a version whole or not at all (so an update's pre-
    and post-image stay together): its end position is (v, k - 1) once the batch read all of v.
    ``change_files``: k for such a read (None: not a change data feed read, or not looked up);
    i = k - 1 is then complete through v. A position still in the initial snapshot (``starting``,
    i = -1) read nothing yet: not complete. Sources: delta-io ``DeltaSourceOffset.scala``
    (``BASE_INDEX``, ``END_INDEX``), ``DeltaSource.scala`` (``buildOffsetFromIndexedFile``,
    ``AdmissionLimits.admit``), ``DeltaSourceCDCSupport.scala`` (``filterFiles``)."""
    if reservoir_version is None:
        return None, False
    if index == -1 and not starting:
        return reservoir_version - 1, True
    if change_files is not None and change_files > 0 and index == change_files - 1:
        return reservoir_version, True
    return reservoir_version, False


def change_files(table_path: str, n: int, settings: Settings) -> int:
    """How many ``cdc`` actions (Delta's ``AddCDCFile``: the change data a MERGE, UPDATE or DELETE
    wrote) Delta version ``n`` of the table at ``table_path`` holds, from its log entry
    ``_delta_log/<n>.json``; 0 when it holds none (or the entry is gone: log retention)."""
    try:
        text = read_text(join(join(str(table_path), "_delta_log"), f"{n:020d}.json"), settings)
    except (OSError, UnicodeDecodeError):
        return 0
    return sum(1 for line in text.splitlines() if line.strip() and "cdc" in json.loads(line))


_TABLE_IDS: dict[str, str] = {}


def _table_id(table_path: str, settings: Settings) -> str | None:
    """The Delta table id (``metaData.id``, which never changes) of the table at ``table_path``,
    cached once found; None while there is no table."""
    uri = delta_rs_uri(table_path)
    if uri not in _TABLE_IDS and is_table(table_path, settings):
        _TABLE_IDS[uri] = open_table(table_path, settings).metadata().id
    return _TABLE_IDS.get(uri)


def covered(settings: Settings, asset: str, version: int | None = None,
            table_version: int | None = None) -> Coverage:
    """What ``asset`` version ``version`` (default: its latest) covers at Delta version
    ``table_version`` of its table (default: the latest). Raises :class:`ProvenanceError` for an
    asset without versions or an unknown version."""
    from kappa.streaming.checkpoint import batch_sources

    registry = Registry(settings)
    try:
        v = registry.version(asset, version) if version is not None else registry.latest(asset)
    except Exception as exc:  # the registry names what exists
        raise ProvenanceError(str(exc)) from exc
    if v is None:
        raise ProvenanceError(f"{asset} has no version yet")
    if not is_table(v.table_path, settings):
        return Coverage(asset, v.version, None)
    table = open_table(v.table_path, settings)
    latest = table.version()
    at = latest if table_version is None else table_version
    if not 0 <= at <= latest:
        raise ProvenanceError(f"{v.name}: its table has Delta versions 0..{latest}, not {table_version}")
    cov = Coverage(asset, v.version, at)
    for entry in sorted(table.history(), key=lambda h: -h.get("version", -1)):
        n = entry.get("version", -1)
        if n > at:
            continue
        meta = _kappa_metadata(entry.get("userMetadata"))
        if meta is not None and meta.get("asset") == asset and meta.get("version") == v.version:
            cov.commit_version, cov.batch_id, cov.sources, cov.recorded_in = n, meta["batch_id"], meta["sources"], "commitInfo"
            return cov
        batch = _sink_batch(v.table_path, n, settings)
        if batch is not None:
            sources = batch_sources(v.checkpoint_path, batch, settings)
            cov.commit_version, cov.batch_id = n, batch
            if sources:
                cov.sources, cov.recorded_in = describe_sources(settings, v, sources), "checkpoint"
            return cov
    return cov


def _kappa_metadata(text) -> dict | None:
    if not isinstance(text, str):
        return None
    try:
        meta = json.loads(text)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) and meta.get("kappa") == 1 else None


def _sink_batch(table_path: str, n: int, settings: Settings) -> int | None:
    """The batch id of Delta version ``n`` when Delta's streaming sink made it (its ``txn``
    action), else None."""
    try:
        text = read_text(join(join(str(table_path), "_delta_log"), f"{n:020d}.json"), settings)
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        action = json.loads(line) if line.strip() else {}
        if "txn" in action:
            return int(action["txn"]["version"])
    return None


@dataclass
class BatchCommit:
    """One Delta commit a micro-batch of a version's query made: its Delta version
    (``table_version``), the micro-batch id, and what the batch read up to (``sources``, as in
    :class:`Coverage`; None when not recorded: a streaming-sink commit whose write-ahead log entry
    Spark has purged)."""

    table_version: int
    batch_id: int
    sources: list[dict] | None

    def reads(self, asset: str, version: int) -> tuple[int | None, bool]:
        """(the Delta version of ``asset`` version ``version`` the batch read through, complete);
        (None, False) when it is not one of the batch's recorded sources."""
        for src in self.sources or []:
            d = src.get("delta")
            if d and d.get("asset") == asset and d.get("version") == version:
                return d.get("table_version"), bool(d.get("complete"))
        return None, False

    @property
    def offsets(self) -> dict[str, dict[str, int]]:
        """The batch's Kafka end offsets: topic -> partition -> offset (exclusive)."""
        return Coverage("", 0, None, sources=self.sources or []).offsets


def batch_commits(settings: Settings, version: Version, limit: int = 500) -> tuple[int, list[BatchCommit]]:
    """(the table's latest Delta version, its micro-batch commits among the last ``limit`` commits,
    oldest first): Kappa writers' commits from ``commitInfo.userMetadata``, Delta streaming-sink
    commits (operation ``STREAMING UPDATE``) from their ``txn`` action and the checkpoint's
    write-ahead log entry. Other commits (table creation, OPTIMIZE, DELETE, VACUUM) are not micro-batches.
    The latest version is -1 when the table does not exist yet."""
    from kappa.streaming.checkpoint import batch_sources

    if not is_table(version.table_path, settings):
        return -1, []
    table = open_table(version.table_path, settings)
    ids: dict | None = None
    out = []
    for entry in table.history(limit):
        n = entry.get("version", -1)
        meta = _kappa_metadata(entry.get("userMetadata"))
        if meta is not None and meta.get("asset") == version.asset and meta.get("version") == version.version:
            out.append(BatchCommit(n, int(meta["batch_id"]), meta.get("sources") or []))
        elif entry.get("operation") == "STREAMING UPDATE" and (batch := _sink_batch(version.table_path, n, settings)) is not None:
            raw = batch_sources(version.checkpoint_path, batch, settings)
            if raw and ids is None and any("reservoirId" in s for s in raw):
                ids = upstream_table_ids(settings, version)
            out.append(BatchCommit(n, batch, describe_sources(settings, version, raw, ids) if raw else None))
    out.sort(key=lambda c: c.table_version)
    return table.version(), out


@dataclass
class BatchWatermark:
    """One micro-batch commit of a version with the Kafka end offsets it covers through every
    upstream asset it reads (:func:`batch_watermarks`): ``snapshot`` is the Delta version a reader
    at that batch sees (the last version before the next micro-batch commit, the latest for the
    last); ``watermark`` topic -> partition -> offset (exclusive), None when it cannot be told (the
    batch does not record its sources, read an upstream partway into a Delta version, or reads one
    partition to two points); ``table_sides``: upstream assets read as a lookup's table side, which
    no batch records (as of the batch, not of an offset: outside the watermark)."""

    batch_id: int
    table_version: int
    snapshot: int
    watermark: dict[str, dict[str, int]] | None
    table_sides: tuple[str, ...] = ()


def batch_watermarks(settings: Settings, version: Version, registry: Registry | None = None,
                     limit: int = 500, _seen: dict | None = None) -> list[BatchWatermark]:
    """Every micro-batch commit of ``version`` among its table's last ``limit`` commits (oldest
    first, :func:`batch_commits`), each with its source-offset watermark: its own Kafka end offsets
    merged with, for each upstream asset it reads as a Delta source, the watermark of that
    upstream's micro-batch commit at or before the Delta version it read through (recursively, so
    a gold batch is described by the Kafka offsets its silver rows came from); an upstream that no
    batch records is a lookup's table side (as in :func:`kappa.lifecycle.cut.solve`), named in
    ``table_sides`` and left out of the watermark. Two versions of one
    asset at batches with equal watermarks were computed from the same records. Raises
    :class:`kappa.delta.registry.RegistryError` for an upstream version the registry lacks."""
    registry = registry or Registry(settings)
    seen = {} if _seen is None else _seen
    key = (version.asset, version.version)
    if key in seen:
        return seen[key]
    latest, commits = batch_commits(settings, version, limit)
    recorded = [u for u in version.upstream
                if any(c.sources is None or c.reads(u, version.upstream[u])[0] is not None for c in commits)]
    sides = tuple(u for u in version.upstream if u not in recorded)
    ups = {u: batch_watermarks(settings, registry.upstream_of(version, u), registry, limit, seen) for u in recorded}
    out = []
    for i, c in enumerate(commits):
        snapshot = commits[i + 1].table_version - 1 if i + 1 < len(commits) else latest
        out.append(BatchWatermark(c.batch_id, c.table_version, snapshot, _watermark(c, version, ups), sides))
    seen[key] = out
    return out


def _watermark(commit: BatchCommit, version: Version, ups: dict[str, list[BatchWatermark]]) -> dict | None:
    """``commit``'s Kafka offsets merged with its upstreams' watermarks (see :func:`batch_watermarks`)."""
    if commit.sources is None:
        return None
    merged = {topic: dict(parts) for topic, parts in commit.offsets.items()}
    for asset, batches in ups.items():
        through, complete = commit.reads(asset, version.upstream[asset])
        if through is None or not complete:
            return None
        up = next((b for b in reversed(batches) if b.table_version <= through), None)
        if up is None or up.watermark is None:
            return None
        for topic, parts in up.watermark.items():
            for part, offset in parts.items():
                if merged.setdefault(topic, {}).setdefault(part, offset) != offset:
                    return None
    return merged or None
