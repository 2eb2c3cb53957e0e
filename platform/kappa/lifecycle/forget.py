"""``kappa forget``: delete one record key of a topic from every table derived from it, keep it out
of every later run and replay, and from the log where Kafka allows.

The request list is a Delta table ``<warehouse>/_kappa/forgotten`` (written with delta-rs), an
append-only event log like the registry: rows ``request_id`` string, ``topic`` string, ``key``
``key_sha256`` string (SHA-256 of the record key's bytes, hex: the list itself must not hold
the key it removes everywhere else), ``event`` string, ``at`` timestamp (UTC), ``reason`` string,
``details`` JSON string. Events: ``requested``, then one per step done: ``located`` (the key's
offsets and the SHA-256 of the event ids it carries), ``deleted`` (rows deleted per table),
``replayed`` (versions recomputed, aggregates promoted), ``checkpoints`` (checkpoints of stateful
versions deleted), ``vacuumed`` (files removed), ``log`` (tombstone, retention report or
``deleteRecords``), ``done``. The list never holds the key nor its event ids in the clear, and
neither does any predicate the forget hands Delta (each compares SHA-256 hashes: a DELETE's
predicate is kept in the table's ``commitInfo``).

Every step is idempotent (a DELETE that finds nothing deletes nothing, a VACUUM with nothing to
remove removes nothing, a tombstone twice is one tombstone), and a step recorded as done is not run
again, so ``kappa forget`` run again after a crash resumes where it stopped.

What a forget does to each kind of table (DDIA ch. 11, "Limitations of immutability": deletion in
an immutable log means rewriting history, not hiding it):

* every version of every ``raw`` table reading the topic (rows with that ``key``), of every
  ``parse`` table reading it (rows whose event id the key's records carry), of every ``pattern``
  table derived from them (matches whose ``event_ids`` hold one of those ids), and the quarantine
  and late-events tables (``topic``, ``key``; a pattern's late rows by event id): Delta ``DELETE``;
* the promoted version of every table derived from those (aggregates: windows, SQL, Python): a
  replay into a new version over the cleaned upstream, gated and promoted (the old versions keep
  aggregate values only, never the key's rows); and the live version of every *stateful* asset
  derived from them (or reading the topic), promoted or not: a replay into a new version (promoted
  only if the old one, or a table below it, was), so no query runs on state built from the key;
* the checkpoints of every older version of every such stateful asset (:attr:`Kind.stateful`:
  window and session aggregation state, stream-stream join buffers, the ``transformWithState``
  state and timers of sliding and pattern assets, a ``parse`` asset's deduplication state keyed
  by event id, all in the RocksDB state store): its query is
  stopped, then its whole checkpoint deleted (state SST and changelog files, offsets, commits), and
  the registry records ``checkpoint_deleted`` on the version, which can then never run again nor
  be promoted (a rollback onto it refuses; one that stays promoted because its replacement failed
  its gate keeps serving its table, and the ``replayed`` step names the failed checks). Every
  stateful version is treated as holding the key, without reading its state: the state store keeps
  the files of the last ``spark.sql.streaming.minBatchesToRetain`` (100) batches, so state the
  newest batch evicted (a closed window, a matched pattern) is still on disk, compressed (RocksDB
  SST blocks and Spark's changelog files, LZ4 by default: a byte search misses the key, Spark's
  state data source finds it), and kinds do not declare what their state is keyed by. The query
  stopped is the runner's (on Kubernetes its SparkApplication) or one of this process's Spark
  session; a ``kappa run`` in another local process must be stopped before the forget, as before a
  replay. The checkpoints of stateless versions (raw,
  parse, changelog, lookup, SQL) are kept: they hold Kafka offsets (topic, partition, offset) or
  Delta source offsets (table id, version, index), commit markers and query metadata, never a
  record's key or value (a ``parse`` asset deduplicates against its table, not in Spark state);
* ``VACUUM … RETAIN 0 HOURS`` on every table it deleted from, after moving the cut past the DELETE
  commits (:func:`kappa.lifecycle.cut.advance_past`: a stable name's pinned snapshot must not show
  the key, nor name a vacuumed file), so the Parquet files that held the rows
  are gone. **Time travel to a Delta version before the forget is gone too** (those versions'
  files no longer exist). Delta's JSON log keeps per-file min/max statistics of removed files until
  log retention (``delta.logRetentionDuration``, 30 days) cleans it up;
* every query started after the request drops the key's records as it reads the topic
  (:func:`forgotten_condition`), so a replay never brings them back. A query already running keeps
  its plan: restart it (``kappa run`` does, every run).

The log itself: a compacted topic gets a tombstone (the key with a null value; compaction then
removes the earlier records, Kafka docs "Log Compaction"). A delete-retention topic keeps the
records until retention removes them; the report says when (never, for ``retention.ms = -1``).
``truncate_log`` deletes the log prefix up to the key's last offset in each partition with Kafka's
``DeleteRecords`` (every record before it, of every key, is lost: replays then refuse, as they do
after retention).
"""

from __future__ import annotations

import operator
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry
from kappa.delta.forgotten import (
    ForgetError,
    Request,
    key_column,
    key_hash,
    key_values,
    record_key,
    record_step,
    requests,
)
from kappa.streaming.kinds import kind_of

def _is_key(catalog, req: "Request"):
    """A Spark Column over Kafka records (or bronze, quarantine, late-events rows: ``topic``,
    ``key``): true for a record of the request's topic with its key. It compares SHA-256 hashes,
    as :func:`kappa.delta.forgotten.forgotten_condition` does, so the predicate Delta writes into
    the DELETE's ``commitInfo`` never holds the key."""
    from pyspark.sql import functions as F

    return (F.col("topic") == req.topic) & (F.sha2(key_column(catalog, req.topic), 256) == F.lit(req.key_sha256))


def _sha256(column):
    """SHA-256 (hex) of a Spark Column's value as a string (UTF-8), as :func:`key_hash` hashes."""
    from pyspark.sql import functions as F

    return F.sha2(column.cast("string"), 256)


def _id_hashes(located: dict) -> dict[str, list[str]]:
    """Parse asset -> SHA-256 (hex) of the event ids the key's records carry, from the ``located``
    step (a request located before hashes were kept stored the ids themselves: hashed here)."""
    if "event_id_sha256" in located:
        return located["event_id_sha256"]
    return {n: sorted(key_hash(i.encode()) for i in ids) for n, ids in located.get("event_ids", {}).items()}



@dataclass
class ForgetReport:
    """What one :func:`forget` call did: the request (its steps done so far, this call's and
    earlier ones), the call's wall-clock duration in seconds (one decimal) and the steps it ran
    itself, in order (a resumed request runs only the steps an earlier call did not finish)."""

    request: Request
    seconds: float
    ran: list[str]  # steps run by this call (the others were done before)


def forget(settings: Settings, topic: str, key: str | None, reason: str, *, key_sha256: str | None = None,
           truncate_log: bool = False, spark=None, on_step=None, registry: Registry | None = None) -> ForgetReport:
    """Forget ``key`` on ``topic`` (see the module doc), resuming an unfinished request for the same
    topic and key. ``key`` may be None when ``key_sha256`` names it instead (the SHA-256, hex, of
    its canonical bytes, :func:`kappa.delta.forgotten.record_key`: an approved request from the
    Dagster UI, :mod:`kappa.lifecycle.approval`); both given, they must agree. ``on_step(step,
    details)`` is called after each step this call runs. ``registry``: the command's snapshot
    (default: a new one, ``kappa forget``'s).

    Raises :class:`ForgetError` for an unknown topic, an empty key or reason, a key that does not
    match ``key_sha256``, or a changelog topic named by hash alone (its key columns' values are
    compared one by one, so the key itself is needed); :class:`kappa.runners.base.RunError` if a
    replay fails."""
    from kappa.delta.declarations import catalog as catalog_of

    if not key and key_sha256 is None:
        raise ForgetError("--key must not be empty")
    if not reason.strip():
        raise ForgetError("--reason must say why (it is kept with the request)")
    catalog = catalog_of(settings)
    if topic not in catalog.topics:
        raise ForgetError(f"unknown topic {topic!r}: not in {settings.assets_dir}/topics.yaml")
    started = time.monotonic()
    canonical = record_key(catalog, topic, key) if key else None
    digest = key_hash(canonical) if canonical is not None else key_sha256
    if key_sha256 is not None and digest != key_sha256:
        raise ForgetError(f"the key given does not match the request's SHA-256 {key_sha256[:16]}… on {topic}")
    if canonical is None and catalog.changelog_key(topic) is not None:
        raise ForgetError(f"{topic} is a changelog topic: its key columns are compared one by one, so forgetting "
                          f"by hash alone cannot find them; give the key (--key), it is checked against the hash")
    # One request per (topic, key): asking again resumes it, or does nothing when it is done (but a
    # --truncate-log not done before).
    req = next((r for r in requests(settings) if (r.topic, r.key_sha256) == (topic, digest)), None)
    if req is None:
        req = Request(uuid.uuid4().hex[:12], topic, digest, reason, datetime.now(timezone.utc))
        record_step(settings, req, "requested")
    req.key = canonical
    from kappa.streaming.session import spark_session

    spark = spark or spark_session(settings)
    registry = registry or Registry(settings)  # the command's one snapshot: the replays' versions go through it
    ran: list[str] = []
    direct = catalog.readers(topic)
    derived = [n for n in catalog.topological([d for n in direct for d in catalog.downstream(n)])
               if n not in direct]
    values = _value_hashes(catalog, topic, key, digest)

    def step(name: str, fn) -> None:
        if name in req.steps and not (name == "log" and truncate_log and "truncated" not in req.steps["log"]):
            return
        details = fn()
        record_step(settings, req, name, details)
        ran.append(name)
        if on_step is not None:
            on_step(name, details)

    step("located", lambda: _locate(spark, settings, catalog, req, direct, registry))
    step("deleted", lambda: _delete(spark, settings, catalog, req, direct, derived, values, registry))
    step("replayed", lambda: _replay(spark, settings, catalog, direct, derived, registry))
    step("checkpoints", lambda: _delete_checkpoints(spark, settings, catalog, req, direct + derived, registry))
    step("vacuumed", lambda: _vacuum(spark, settings, req.steps["deleted"], registry))
    step("log", lambda: _log(spark, settings, catalog, req, truncate_log))
    step("done", lambda: {})
    return ForgetReport(request=req, seconds=round(time.monotonic() - started, 1), ran=ran)


def step_summary(step: str, details: dict) -> str:
    """One line saying what a step did, from the ``details`` it recorded (counts and asset
    versions; never the key): ``located 12 records``, ``deleted 24 rows from 2 tables``,
    ``replayed departures_hourly v2 (promoted)``, ``deleted the checkpoints of flights/v1``,
    ``vacuumed 2 tables``, ``log: retention unlimited: …``, ``done``."""
    if step == "located":
        return f"located {details.get('records', 0)} records"
    if step == "deleted":
        tables = sum(1 for n in details.get("tables", {}).values() if n)
        return f"deleted {details.get('rows', 0)} rows from {tables} tables"
    if step == "replayed":
        return "replayed " + (", ".join(f"{a} v{x['version']}{' (promoted)' if x['promoted'] else ''}"
                                        for a, x in details.items()) or "nothing")
    if step == "checkpoints":
        return "deleted the checkpoints of " + (", ".join(details.get("checkpoints", {})) or "no stateful version")
    if step == "vacuumed":
        return f"vacuumed {len(details.get('files_removed', {}))} tables"
    if step == "log":
        return "log: " + "; ".join(f"{k} {v}" for k, v in details.items())
    return step


def _topic_records(spark, settings: Settings, topic: str, catalog=None, registry: Registry | None = None):
    """The whole retained log of ``topic`` as a batch DataFrame (Kafka source columns); with the
    ``catalog`` and the command's ``registry``, the :data:`~kappa.streaming.records.KAFKA_COLUMNS`
    of the whole log: below the log start, the records the topic's archive holds
    (:func:`kappa.streaming.sources.archived_log`)."""
    from kappa.kafka.topics import start_offsets
    from kappa.delta.archive import archive_version
    from kappa.streaming.records import KAFKA_COLUMNS
    from kappa.streaming.sources import archived_log, kafka_options

    log = (spark.read.format("kafka").options(**kafka_options(settings)).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    spec = catalog.topics.get(topic) if catalog is not None else None
    if spec is None or spec.archive is None:
        return log
    kept = archive_version(registry, spec.archive)
    below = {p: s for p, s in start_offsets(settings, [topic]).get(topic, {}).items() if s > 0}
    if kept is None or not below:
        return log.select(*KAFKA_COLUMNS)
    return (archived_log(spark, {topic: {"table": kept.table_path, "below": below}}, stream=False)
            .unionByName(log.select(*KAFKA_COLUMNS)))


def _locate(spark, settings: Settings, catalog, req: Request, direct: list[str], registry: Registry) -> dict:
    """The key's last offset per partition, its records' offsets (``offsets``: partition -> list)
    and, per parse asset, the SHA-256 (hex) of the event ids its records carry
    (``event_id_sha256``; hashes, so the forgotten list holds no id in the clear): one batch read
    of the topic, below its log start from its archive (kept in the request, so a later step
    needs no log)."""
    from pyspark.sql import functions as F

    mine = _topic_records(spark, settings, req.topic, catalog, registry).where(_is_key(catalog, req)).cache()
    found: dict[str, list[int]] = {}
    for r in mine.select("partition", "offset").collect():
        found.setdefault(str(r["partition"]), []).append(int(r["offset"]))
    last = {p: max(offs) for p, offs in found.items()}
    ids: dict[str, list[str]] = {}
    for name in direct:
        kind = kind_of(catalog[name])
        if kind.forget == "event_ids":
            col = F.get_json_object(F.col("value").cast("string"), f"$.{kind.event_id(catalog[name])}")
            ids[name] = sorted({r[0] for r in mine.select(_sha256(col)).collect() if r[0] is not None})
    records = mine.count()
    mine.unpersist()
    return {"records": records, "last_offsets": last, "event_id_sha256": ids,
            # Coordinates of the key's records: the archive's rows this forget deletes, which its
            # contiguity check then excuses (kappa.delta.forgotten.forgotten_offsets).
            "offsets": {p: sorted(offs) for p, offs in sorted(found.items())}}


def _open(spark, path: str):
    """The Delta table at ``path``, or None where there is none (a version never written)."""
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path) if DeltaTable.isDeltaTable(spark, path) else None


def _delete_rows(table, cond) -> int:
    """DELETE ``cond`` from ``table``; returns the rows deleted (from the commit's metrics)."""
    table.delete(cond)
    metrics = table.history(1).select("operation", "operationMetrics").first()
    return int((metrics["operationMetrics"] or {}).get("numDeletedRows", 0)) if metrics["operation"] == "DELETE" else 0


def _row_condition(catalog, name: str, columns: set[str], req: Request, direct: list[str],
                   values: dict[str, str], id_columns: set[str], ids: list[str]):
    """Which rows of a version of asset ``name`` (its table has ``columns``) hold the forgotten
    key, or None:

    * ``raw`` (bronze): the record's ``topic`` and key;
    * ``parse`` (silver): the event ids the key's records carry;
    * ``changelog``: the key columns' values;
    * any table derived from those: rows naming one of those event ids (an event-id column, or a
      pattern match's ``event_ids``) or carrying the key's columns (e.g. sessions per tailnum).
      An aggregate with none of these columns keeps no row of the key: it is replayed instead.

    ``ids`` are SHA-256 hashes of the event ids; every comparison is of hashes (see the module doc)."""
    from pyspark.sql import functions as F

    spec = catalog[name]
    if name in direct:
        rule = kind_of(spec).forget
        if rule == "record_key":
            return _is_key(catalog, req)
        if rule == "event_ids":
            mine = _id_hashes(req.steps["located"]).get(name, [])
            return _sha256(F.col(kind_of(spec).event_id(spec))).isin(mine) if mine else None
        if rule == "key_columns":
            return _equal_all(values)
    conds = []
    if ids and "event_ids" in columns:
        conds.append(F.exists(F.col("event_ids"), lambda i: _sha256(i).isin(ids)))
    if ids:
        conds += [_sha256(F.col(c)).isin(ids) for c in sorted(id_columns & columns)]
    if values and set(values) <= columns:
        conds.append(_equal_all(values))
    return reduce(operator.or_, conds) if conds else None


def _value_hashes(catalog, topic: str, key: str | None, digest: str) -> dict[str, str]:
    """Value column -> SHA-256 (hex) of the value ``key`` stands for on ``topic``
    (:func:`kappa.delta.forgotten.key_values`, hashed). Without the key (a request named by hash),
    a topic's ``key_field`` value hashes to ``digest`` itself (its canonical bytes are the key's
    UTF-8); :func:`forget` refuses a changelog topic named by hash alone before this runs."""
    if key:
        return {c: key_hash(v.encode()) for c, v in key_values(catalog, topic, key).items()}
    field_ = catalog.topics[topic].key_field
    return {field_: digest} if field_ else {}


def _equal_all(values: dict[str, str]):
    """Every column of ``values`` (column -> SHA-256 of the value, hex) holds its value."""
    from pyspark.sql import functions as F

    return reduce(operator.and_, [_sha256(F.col(c)) == F.lit(h) for c, h in values.items()])


def _delete(spark, settings: Settings, catalog, req: Request, direct: list[str], derived: list[str],
            values: dict[str, str], registry: Registry) -> dict:
    """DELETE the key's rows (:func:`_row_condition`) from every version of the tables reading the
    topic and of every table derived from them, and from the quarantine, late-events and
    rescued-fields tables. Returns ``{"tables": {table path: rows deleted}, "rows": total}``."""
    from pyspark.sql import functions as F

    from kappa.delta.registry import late_events_path, quarantine_path, rescued_path

    ids = sorted({i for found in _id_hashes(req.steps["located"]).values() for i in found})
    id_columns = {kind_of(catalog[n]).event_id(catalog[n]) for n in direct if kind_of(catalog[n]).forget == "event_ids"}
    deleted: dict[str, int] = {}
    for name in catalog.topological(direct + derived):
        for path in [v.table_path for v in registry.versions(name)]:
            table = _open(spark, path)
            if table is None:
                continue
            cond = _row_condition(catalog, name, set(table.toDF().columns), req, direct, values, id_columns, ids)
            if cond is not None:
                deleted[path] = _delete_rows(table, cond)
    late = _is_key(catalog, req)
    keeping = [n for n in derived if kind_of(catalog[n]).keeps_late_rows]
    if ids and keeping:
        # A derived table's late rows (a pattern's) carry no Kafka coordinates, only their event id.
        late = late | (F.col("asset").isin(keeping) & _sha256(F.col("event_id")).isin(ids))
    # The rescued fields of silver's records (schema drift) carry the event id, not the record's key.
    rescued = _sha256(F.col("event_id")).isin(ids) if ids else F.lit(False)
    for path, cond in ((str(quarantine_path(settings)), _is_key(catalog, req)), (str(late_events_path(settings)), late),
                       (str(rescued_path(settings)), rescued)):
        table = _open(spark, path)
        deleted[path] = _delete_rows(table, cond) if table is not None else 0
    return {"tables": deleted, "rows": sum(deleted.values())}


def _replay(spark, settings: Settings, catalog, direct: list[str], derived: list[str], registry: Registry) -> dict:
    """Replay into a new version every promoted table derived from the cleaned ones (promoted) and
    every stateful asset among ``direct`` and ``derived`` with a live version (promoted only if it
    or an asset below it was): one replay per chain head, a replay carrying its downstream chain
    (promoted as one, :func:`kappa.lifecycle.promotion.replay`). Returns asset ->
    ``{"version", "previous", "promoted", "failed"}`` (the new version, the one promoted before it,
    whether the chain was promoted, the blocking checks that failed)."""
    from kappa.lifecycle.promotion import replay

    done: dict[str, dict] = {}
    covered: set[str] = set()
    for name in catalog.topological(direct + derived):
        events = registry.events()  # the snapshot, with the versions the replays below added through it
        promoted = registry.promoted(name, events) is not None
        # A stateful live version's state may hold the key: it needs a successor before its
        # checkpoint goes (:func:`_delete_checkpoints`), promoted or not.
        stateful = kind_of(catalog[name]).stateful(catalog[name]) and registry.latest(name, events) is not None
        if name in covered or (name in direct and not stateful) or not (promoted or stateful):
            continue
        # The replay carries the downstream chain: promote it if any member of it is promoted, so a
        # promoted table below an unpromoted stateful one is not left behind.
        chain_promoted = any(registry.promoted(n, events) is not None for n in [name, *catalog.downstream(name)])
        report = replay(settings, name, promote=chain_promoted, spark=spark, registry=registry)
        covered.update(report.versions)
        for asset, v in report.versions.items():
            done[asset] = {"version": v, "previous": report.previous.get(asset), "promoted": report.promoted,
                           "failed": [c.name for c in report.gates[asset].failed]}
    return done


def _delete_checkpoints(spark, settings: Settings, catalog, req: Request, names: list[str],
                        registry: Registry) -> dict:
    """Delete the checkpoint of every version of every stateful asset in ``names`` that may hold
    the key: every version older than the one the ``replayed`` step made (all versions of an asset
    it did not replay: none of them is live). Each version's query is stopped first (the runner's,
    and one of this Spark session by its name), then its checkpoint folder deleted whole, then
    ``checkpoint_deleted`` recorded on the version (:class:`kappa.delta.registry.Registry`: it can
    never run or be promoted again). A version recorded before is skipped; a checkpoint already
    gone is recorded with 0 files (a crash between the deletion and the record).

    Returns ``{"checkpoints": {"<asset>/v<N>": files deleted}, "stopped": ["<asset>/v<N>", …]}``."""
    from kappa.core.storage import delete_tree
    from kappa.runners import pick_runner
    from kappa.runners.local import stop_between_batches
    from kappa.streaming.query import query_name

    replayed = req.steps.get("replayed", {})
    runner = pick_runner(settings, spark=spark)
    deleted: dict[str, int] = {}
    stopped: list[str] = []
    for name in names:
        if not kind_of(catalog[name]).stateful(catalog[name]):
            continue
        successor = replayed.get(name, {}).get("version")
        for ver in registry.versions(name):
            if (successor is not None and ver.version >= successor) or ver.checkpoint_deleted is not None:
                continue
            # Stop before deleting: a query would otherwise write its next batch's state and
            # offsets into a fresh folder, or fail on files gone from under it.
            running = [q for q in spark.streams.active if q.name == query_name(name, ver.version)]
            by_runner = runner.stop(name, ver.version)
            stop_between_batches(running)
            if by_runner or running:
                stopped.append(ver.name)
            files = delete_tree(ver.checkpoint_path, settings)
            registry.record(name, ver.version, "checkpoint_deleted", request_id=req.request_id, reason="forget",
                            files=files)
            deleted[ver.name] = files
    return {"checkpoints": deleted, "stopped": stopped}


def _vacuum(spark, settings: Settings, deleted: dict, registry: Registry) -> dict:
    """VACUUM RETAIN 0 HOURS every table the forget deleted from. Before it, the cut is moved past
    the DELETE (and REORG) commits (:func:`kappa.lifecycle.cut.advance_past`): a stable name pinned
    before them would still show the key, and VACUUM would remove files its snapshot names. Returns
    path -> files removed (``"vacuumed"`` for a table on an object store, where files are not
    counted) and the pins moved. Raises :class:`kappa.lifecycle.cut.CutError` when a reader has not
    read past the DELETE within a minute (the step is not recorded: ``kappa forget`` again resumes)."""
    from kappa.core.storage import local_path
    from kappa.delta.tables import open_table
    from kappa.lifecycle.cut import advance_past

    def parquet_files(local: Path | None) -> int | None:
        return sum(1 for _ in local.rglob("*.parquet")) if local is not None else None

    tables = {path: table for path, rows in deleted["tables"].items()
              if rows and (table := _open(spark, path)) is not None}
    for path, table in tables.items():
        # With deletion vectors a DELETE only marks rows deleted in the old files: rewrite
        # those files first (Delta docs, "REORG TABLE … APPLY (PURGE)").
        props = table.detail().select("properties").first()[0] or {}
        if props.get("delta.enableDeletionVectors") == "true":
            spark.sql(f"REORG TABLE delta.`{path}` APPLY (PURGE)")
    latest = {path: open_table(path, settings).version() for path in tables}
    moved = advance_past(settings, latest, reason="forget", registry=registry).moved
    # Delta refuses a retention below 7 days unless told the caller knows no reader or writer needs
    # the old files (Delta docs, "Remove files no longer referenced by a Delta table").
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    out = {}
    try:
        for path, table in tables.items():
            local = local_path(path)
            before = parquet_files(local)
            _vacuum_now(spark, table, path)
            out[path] = before - parquet_files(local) if before is not None else "vacuumed"
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    return {"files_removed": out, "pins_moved": {a: list(m) for a, m in moved.items()}}


def _vacuum_now(spark, table, path: str) -> None:
    """VACUUM ``path`` RETAIN 0 HOURS in LITE mode: the files to delete are those the Delta log
    removed (our DELETE's among them), not a listing of the whole directory, so seconds instead of
    half a minute per table here. Delta refuses LITE when the log no longer names every removed
    file (log retention cleaned it up); then FULL (Delta docs, "Remove files no longer referenced
    by a Delta table": VACUUM … LITE | FULL)."""
    from pyspark.errors import PySparkException

    try:
        spark.sql(f"VACUUM delta.`{path}` LITE RETAIN 0 HOURS")
    except PySparkException as err:
        if "FULL" not in str(err):
            raise
        table.vacuum(0)


def _log(spark, settings: Settings, catalog, req: Request, truncate: bool) -> dict:
    """Tombstones on a compacted topic (one per spelling of the key found in the log: compaction
    compares key bytes); otherwise report retention; ``truncate``: DeleteRecords up to just after
    the key's last offset in each partition holding it."""
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import delete_records_before

    spec = catalog.topics[req.topic]
    out: dict = {}
    if spec.compacted:
        spellings = [r["key"] for r in _topic_records(spark, settings, req.topic)
                     .where(_is_key(catalog, req)).select("key").distinct().collect()]
        # No spelling left in the log: the key given (none, for a request named by hash alone).
        keys = spellings or ([req.key] if req.key else [])
        if keys:
            produce(settings, req.topic, [(bytes(k), None, None) for k in keys])
        out["tombstones"] = len(keys)
    elif spec.retention_ms < 0:
        out["retention"] = "unlimited: the records stay in the log (kept out of every table by the forgotten list)"
    else:
        out["retention"] = (f"retention.ms={spec.retention_ms}: the records are gone from the log by "
                            f"{datetime.now(timezone.utc).timestamp() + spec.retention_ms / 1000:.0f} (epoch s) at the latest"
                            f" (plus the segment roll time)")
    if truncate:
        before = {int(p): off + 1 for p, off in req.steps["located"]["last_offsets"].items()}
        if before:
            delete_records_before(settings, req.topic, before)
        out["truncated"] = {str(p): off for p, off in before.items()}
    return out
