"""``kappa maintain``: compact, checkpoint and vacuum Delta tables outside the streaming queries.

Why here and not in the queries: open-source Delta's auto compaction is a synchronous OPTIMIZE run
by the writer after its commit (Delta docs, "Optimizations" -> "Auto compaction"), so with it on
every micro-batch of a streamed table may pay for a compaction before the next one starts; with
``spark.databricks.delta.autoCompact.minFileSize`` at its default (half of ``maxFileSize``) small
compacted files are compacted again. Kappa's Spark configuration turns it off
(:func:`kappa.streaming.session.spark_conf`) and this module does the same work on a schedule
(``kappa maintain``, the Dagster ``maintain`` job), never inside a micro-batch.

For every version of each asset (:meth:`kappa.delta.registry.Registry.versions`, retired ones too:
their tables stay) and for the shared tables, in this order:

1. **OPTIMIZE** (compaction, bin-packing; Delta docs, "Optimizations" -> "Compaction
   (bin-packing)"). Its commit removes the small files and adds the compacted ones with
   ``dataChange: false``: readers keep their snapshot, a read before and after gives the same rows,
   and a Delta streaming source downstream skips the commit (Delta protocol, "Add File and Remove
   File": ``dataChange``). It conflicts with a concurrent writer only where that writer read the
   files it removed (Delta docs, "Concurrency control" -> "Write conflicts": OPTIMIZE against an
   INSERT does not conflict; against UPDATE, DELETE, MERGE it can). A query's MERGE micro-batch that
   lost that race runs again on the compacted snapshot (:func:`kappa.streaming.writers.run_dml`);
   a maintenance OPTIMIZE that lost it is reported for that table and the others go on.
2. **A Delta checkpoint** of the table's new version (Delta protocol, "Checkpoints"), so readers
   and the queries rebuild the snapshot from one Parquet file instead of replaying the JSON commits.
3. **VACUUM** with Delta's retention (the table's ``delta.deletedFileRetentionDuration``, 7 days by
   default; Delta docs, "Remove files no longer referenced by a Delta table"), or ``retention_hours``
   when given. VACUUM never deletes a file of the table's current snapshot; the retention keeps the
   files an older snapshot still names (time travel, a downstream streaming query behind) for that
   long. A retention below the platform floor (``KAPPA_MIN_RETENTION_HOURS``, default 168 hours:
   Delta's 7 days) is refused (:func:`check_retention`): it wipes the time travel readers count on,
   and Delta warns that old snapshots and uncommitted files may still be in use by concurrent
   readers or writers (same doc; a running query's micro-batch writes its files before it commits
   them). Only ``kappa forget`` (:mod:`kappa.lifecycle.forget`), which must destroy the old files,
   vacuums with ``RETAIN 0 HOURS``.

   **Pinned snapshots.** A stable name reads the snapshot pinned by the cut
   (:mod:`kappa.lifecycle.cut`), which may be older than the table's latest version. Maintenance
   first moves the cut forward (:func:`kappa.lifecycle.cut.advance`, without waiting), then leaves
   out of VACUUM any table whose pinned snapshot's files may be older than the retention: files a
   snapshot names are removed (tombstoned) no earlier than the commit after it, and VACUUM deletes
   only files tombstoned longer ago than the retention, so the snapshot is safe while the commit
   after it is younger than the retention (the table is reported with ``skipped`` saying so).

Engines: the tables the queries write (asset versions, quarantine, late events) with Spark's Delta
(``OPTIMIZE delta.`path```, ``DeltaLog.checkpoint``, ``VACUUM``); the registry and the forgotten
list, written by delta-rs, with delta-rs (``DeltaTable.optimize.compact``, ``create_checkpoint``,
``vacuum``).

Units: files and rows are counts of the table's current snapshot (its ``add`` actions; rows from
their statistics, else the Parquet footers), bytes are the files' sizes, ``seconds`` wall-clock.

Errors: :class:`MaintainError` (a ``KappaError``) for a retention below the platform floor; an unknown asset
name raises :class:`kappa.spec.SpecError` before anything runs. A table whose maintenance fails
(a lost OPTIMIZE race, an I/O error) is reported with ``error`` set and the others are still done;
:attr:`MaintainReport.failed` lists them.

Example::

    report = maintain(settings, ["flights"])
    for t in report.tables:
        print(t.table, t.files_before, "->", t.files_after)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from kappa.config import Settings
from kappa.delta.registry import Registry
from kappa.errors import KappaError


class MaintainError(KappaError, ValueError):
    """A maintenance request Kappa refuses (a VACUUM retention below the platform floor)."""


@dataclass
class TableReport:
    """What maintenance did to one table. ``table``: ``<asset>/v<N>`` or ``_kappa/<name>``;
    ``engine``: ``spark`` or ``delta-rs``; files, bytes and rows of the current snapshot before and
    after; ``version_*``: its Delta version (None: no table yet); ``compacted``: files the OPTIMIZE
    removed; ``vacuumed``: files VACUUM deleted; ``seconds``: wall-clock; ``error``: why it failed
    (None: done), ``skipped``: why nothing, or no VACUUM, was done (no table; a pinned snapshot too old)."""

    table: str
    path: str
    engine: str
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    version_before: int | None = None
    version_after: int | None = None
    compacted: int = 0
    vacuumed: int = 0
    seconds: float = 0.0
    error: str | None = None
    skipped: str | None = None


@dataclass
class MaintainReport:
    """Every table's :class:`TableReport`, the retention used (hours; None: Delta's default) and
    the whole run's wall-clock seconds."""

    tables: list[TableReport] = field(default_factory=list)
    retention_hours: float | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> list[TableReport]:
        """The tables whose maintenance raised."""
        return [t for t in self.tables if t.error is not None]

    def to_json(self) -> dict:
        """The report as plain JSON values (``kappa maintain --format json``, the Dagster op's output)."""
        return asdict(self)


@dataclass(frozen=True)
class _Snapshot:
    version: int | None
    files: int = 0
    bytes: int = 0
    rows: int = 0


def _snapshot(path: str, settings: Settings) -> _Snapshot:
    """Files, bytes and rows of the current snapshot of the Delta table at ``path`` (delta-rs reads
    the log; rows from each add's ``numRecords`` statistic, else the Parquet footers)."""
    import pyarrow as pa
    from kappa.delta.tables import is_table, open_table, table_rows

    if not is_table(path, settings):
        return _Snapshot(None)
    table = open_table(path, settings)
    adds = pa.table(table.get_add_actions(flatten=True))
    sizes = adds["size_bytes"].to_pylist()
    records = adds["num_records"].to_pylist() if "num_records" in adds.column_names else [None]
    rows = sum(records) if None not in records else table_rows(path, settings)[0]
    return _Snapshot(table.version(), len(sizes), sum(sizes), rows)


def targets(settings: Settings, assets: list[str] | None = None,
            registry: Registry | None = None) -> list[tuple[str, str, str]]:
    """(name, path, engine) of every table to maintain: each version of ``assets`` (default: every
    declared asset, in dependency order), then the quarantine, late-events and rescued-fields
    tables (``spark``), then the registry, the forgotten list and the alerts (``delta-rs``); the
    versions from ``registry``, the command's snapshot (default: a new one). Raises
    :class:`kappa.spec.SpecError` for an undeclared asset."""
    from kappa.config import join
    from kappa.delta.forgotten import forgotten_path
    from kappa.delta.registry import late_events_path, quarantine_path, rescued_path
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.quality.freshness import alerts_path

    catalog = catalog_of(settings)
    for name in assets or []:
        catalog[name]  # an unknown name fails with the list of declared assets
    names = catalog.topological(list(assets) if assets else list(catalog.assets))
    registry = registry or Registry(settings)
    events = registry.events()
    out = [(v.name, v.table_path, "spark") for n in names for v in registry.versions(n, events)]
    out += [("_kappa/quarantine", str(quarantine_path(settings)), "spark"),
            ("_kappa/late_events", str(late_events_path(settings)), "spark"),
            ("_kappa/rescued", str(rescued_path(settings)), "spark"),
            ("_kappa/registry", str(join(settings.warehouse, "_kappa", "registry")), "delta-rs"),
            ("_kappa/forgotten", str(forgotten_path(settings)), "delta-rs"),
            ("_kappa/alerts", str(alerts_path(settings)), "delta-rs")]
    return out


def check_retention(settings: Settings, retention_hours: float | None) -> None:
    """Refuse a VACUUM retention (hours; None: each table's own) below the platform floor,
    :attr:`Settings.min_retention_hours` (``KAPPA_MIN_RETENTION_HOURS``, default 168 h: Delta's
    default ``delta.deletedFileRetentionDuration``), or not a number. Raises :class:`MaintainError`
    naming the floor."""
    if retention_hours is None:
        return
    floor = settings.min_retention_hours
    if not retention_hours >= floor:  # NaN too
        raise MaintainError(f"the VACUUM retention (--vacuum-retention, retention_hours) must be at least the "
                            f"platform floor of {floor:g} hours (KAPPA_MIN_RETENTION_HOURS), got {retention_hours:g} "
                            "(only `kappa forget` vacuums below it, with RETAIN 0 HOURS)")


def maintain(settings: Settings, assets: list[str] | None = None, *, retention_hours: float | None = None,
             spark=None, on_table: Callable[[TableReport], None] | None = None,
             say: Callable[[str], None] | None = None, registry: Registry | None = None) -> MaintainReport:
    """OPTIMIZE, checkpoint and VACUUM every table of :func:`targets` (see the module docstring).
    ``retention_hours``: VACUUM's retention (None: each table's own, Delta's default 7 days);
    ``spark``: the session for the Spark tables (default: :func:`kappa.streaming.session.spark_session`,
    started only when a Spark table exists); ``say(message)`` before each table, ``on_table(report)``
    after it; ``registry``: the command's snapshot (default: a new one, ``kappa maintain``'s).

    Raises :class:`MaintainError` for ``retention_hours`` below the platform floor
    (:func:`check_retention`); :class:`kappa.spec.SpecError` for an unknown asset."""
    check_retention(settings, retention_hours)
    started = time.monotonic()
    report = MaintainReport(retention_hours=retention_hours)
    registry = registry or Registry(settings)  # the command's one snapshot, with the pins the cut moves
    pinned = _recut(settings, say, registry)
    for name, path, engine in targets(settings, assets, registry):
        before = _snapshot(path, settings)
        t = TableReport(name, path, engine, files_before=before.files, bytes_before=before.bytes,
                        rows_before=before.rows, version_before=before.version)
        if before.version is None:
            t.skipped = "no table yet"
        else:
            if say is not None:
                say(f"{name}: {before.files} files, {before.rows:,} rows, Delta version {before.version}")
            t0 = time.monotonic()
            try:
                if engine == "spark":
                    if spark is None:
                        from kappa.streaming.session import spark_session

                        spark = spark_session(settings)
                    keep = _pin_older_than(path, pinned.get(path), retention_hours, settings)
                    t.compacted, t.vacuumed = _spark_table(spark, path, retention_hours, settings, vacuum=keep is None)
                    t.skipped = keep
                else:
                    t.compacted, t.vacuumed = _delta_rs_table(path, retention_hours, settings)
            except Exception as err:  # noqa: BLE001 - one table's failure must not stop the others
                t.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            t.seconds = round(time.monotonic() - t0, 2)
        after = _snapshot(path, settings)
        t.files_after, t.bytes_after, t.rows_after, t.version_after = after.files, after.bytes, after.rows, after.version
        report.tables.append(t)
        if on_table is not None:
            on_table(t)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _recut(settings: Settings, say: Callable[[str], None] | None, registry: Registry) -> dict[str, int]:
    """Move the cut forward before vacuuming (module docstring); returns table path -> the pinned
    snapshot of every promoted version after it."""
    from kappa.lifecycle.cut import advance

    if registry.promoted_all():
        moved = advance(settings, reason="maintain", wait_s=0.0, registry=registry)
        for group, why in moved.refused.items():
            if say is not None:
                say(f"the cut of {group} did not move: {why}")
    return {v.table_path: v.snapshot for v in registry.promoted_all().values() if v.snapshot is not None}


#: Delta's default ``delta.deletedFileRetentionDuration`` (7 days), in hours.
DEFAULT_RETENTION_HOURS = 168.0


def _pin_older_than(path: str, snapshot: int | None, retention_hours: float | None, settings: Settings) -> str | None:
    """Why VACUUM must leave the table at ``path`` alone (its pinned ``snapshot``'s files may be
    older than the retention), or None when it may run."""
    from kappa.delta.tables import open_table

    if snapshot is None:
        return None
    table = open_table(path, settings)
    if snapshot >= table.version():
        return None
    after = next((h for h in table.history() if h.get("version") == snapshot + 1), None)
    hours = retention_hours if retention_hours is not None else DEFAULT_RETENTION_HOURS
    if after is None or time.time() - after["timestamp"] / 1000 >= hours * 3600:
        return (f"VACUUM left out: the pinned snapshot (Delta version {snapshot}) may name files removed more than "
                f"{hours:g} h ago; move the cut (`kappa advance`) first")
    return None


def _spark_table(spark, path: str, retention_hours: float | None, settings: Settings,
                 vacuum: bool = True) -> tuple[int, int]:
    """OPTIMIZE, checkpoint and (unless not ``vacuum``) VACUUM one table with Spark's Delta;
    returns (files the OPTIMIZE removed, files VACUUM deleted)."""
    removed = 0
    if _snapshot(path, settings).files > 1:  # one file or none: nothing to bin-pack, spare the Spark job
        metrics = spark.sql(f"OPTIMIZE delta.`{path}`").first()["metrics"]
        removed = int(metrics["numFilesRemoved"]) if metrics is not None else 0
    # Delta's Python API has no checkpoint call; DeltaLog's own (the one its writers call every
    # `delta.checkpointInterval` commits) writes the checkpoint of the latest snapshot.
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())  # the OPTIMIZE's version
    log.checkpoint()
    return removed, _spark_vacuum(spark, path, retention_hours) if vacuum else 0


def _spark_vacuum(spark, path: str, retention_hours: float | None) -> int:
    """VACUUM with the table's retention, or ``retention_hours``; returns the files deleted (the
    ``numDeletedFiles`` of the ``VACUUM END`` commit Delta logs)."""
    retain = f" RETAIN {retention_hours} HOURS" if retention_hours is not None else ""
    confs = {
        # VACUUM lists and deletes with this many tasks (Spark's default 10,000: minutes for a
        # table of a few files on two cores); the shuffle partitions fit the machine.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": spark.conf.get("spark.sql.shuffle.partitions"),
    }
    if retention_hours is not None:
        # Delta refuses a retention shorter than the table's unless the check is off; the caller
        # asked for it by name (never below the platform floor: refused in maintain).
        confs["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        spark.sql(f"VACUUM delta.`{path}`{retain}")
    finally:
        for key in confs:
            spark.conf.unset(key)
    ends = (spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 5").where("operation = 'VACUUM END'")
            .orderBy("version", ascending=False).select("operationMetrics").first())
    return int((ends[0] or {}).get("numDeletedFiles", 0)) if ends is not None else 0


def _delta_rs_table(path: str, retention_hours: float | None, settings: Settings) -> tuple[int, int]:
    """The same three steps with delta-rs for a table delta-rs writes (registry, forgotten list),
    with Kappa's delta-rs options (on an object store: conditional puts, as every other writer of
    these tables)."""
    from kappa.delta.tables import open_table

    removed = int(open_table(path, settings).optimize.compact().get("numFilesRemoved", 0))
    table = open_table(path, settings)
    table.create_checkpoint()
    if retention_hours is None:
        deleted = table.vacuum(dry_run=False)
    else:
        # delta-rs takes whole hours: round up, never below the asked retention.
        deleted = table.vacuum(retention_hours=math.ceil(retention_hours), dry_run=False,
                               enforce_retention_duration=False)
    return removed, len(deleted)
