"""The one base of every ``foreachBatch`` writer: transactional Delta writes per micro-batch.

Exactly-once effects come from the checkpoint plus idempotent sinks (Spark's Structured Streaming
guide, "Fault Tolerance Semantics"; Delta docs, "Idempotent table writes in foreachBatch"). Every
Delta write a :class:`MicroBatchWriter` makes carries a transaction id: ``txnAppId`` = the version's
writer id (:meth:`kappa.delta.registry.Version.writer_id`; a side table such as the quarantine or
late-events table gets ``<writer id>-<side>``) and ``txnVersion`` = the micro-batch id. Delta records
the pair in the table's log and skips a write whose pair it has already committed, so a batch that
Spark re-runs after a crash (its commit log entry missing) is skipped where it already committed.
An append to the asset's own table, once it exists, records the pair without Delta's look-up of it
(:func:`append_with_txn`): the re-run rule below has already decided.

The base owns a micro-batch's sequence (:meth:`MicroBatchWriter.__call__`, the template); a kind's
writer only says what the batch writes (:meth:`MicroBatchWriter.commits`: a list of
:class:`Commit`, built with :meth:`~MicroBatchWriter.append_commit`,
:meth:`~MicroBatchWriter.side_commit` and :meth:`~MicroBatchWriter.dml_commit`). The sequence:

1. **The re-run rule**, one for every kind: a batch whose id is at or below the last ``txnVersion``
   this writer committed to the asset's table (read once per query start, :meth:`~MicroBatchWriter.rerun`)
   is a re-run of a batch whose last commit exists; it writes nothing and is run into the noop sink
   (:func:`run_for_state`), so every stateful operator upstream commits its state for it.
2. Otherwise the writer's :meth:`~MicroBatchWriter.commits` (the batch computed, nothing written),
   then the fault point ``before_write``;
3. each commit in :data:`COMMIT_ORDER` (the side tables, then the asset's table last: the one the
   re-run rule reads), each followed by its fault point (:data:`AFTER_COMMIT`:
   ``after_quarantine_commit``, ``after_late_commit``, ``after_table_commit``);
4. ``after_batch``, once the batch function is done and before Spark writes its commit log entry.

The fault points are those of ``KAPPA_FAULT`` (:class:`kappa.faults.Fault`); no subclass places one.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.core.storage import local_path
from kappa.delta.registry import Version, late_events_path, quarantine_path, rescued_path
from kappa.errors import KappaError
from kappa.spec import AssetSpec
from kappa.streaming.records import late_events_schema, quarantine_schema, rescued_schema

_log = logging.getLogger(__name__)

#: Rows a micro-batch's append puts in one Parquet file, at most (:func:`files_for`). A live
#: micro-batch of a few thousand rows is one file, not one per partition of the frame; a replay's
#: batch of hundreds of thousands keeps the frame's partitions (its write parallelism).
ROWS_PER_FILE = 50_000

#: What :meth:`MicroBatchWriter.step` puts between Spark's description of a micro-batch's jobs and
#: the step's name, in the local property Spark describes a job by (``spark.job.description``: the
#: Spark UI's and status store's job description); :func:`kappa.harness.bench.status.job_step`
#: reads it back.
STEP_MARK = " | kappa step: "
JOB_DESCRIPTION = "spark.job.description"


#: Attempts of one micro-batch's MERGE/UPDATE/DELETE when a concurrent commit conflicts with it
#: (:meth:`MicroBatchWriter.dml`); the last conflict fails the query like any other error.
DML_ATTEMPTS = 4


def ensure_table(spark: SparkSession, path: str, schema, properties: dict[str, str] | None = None) -> str:
    """Create the Delta table at ``path`` with ``schema`` (a Spark ``StructType``) and table
    ``properties`` unless it exists; returns ``path``."""
    from delta.tables import DeltaTable

    # Delta compares a CREATE TABLE location with the table's qualified path, in which Hadoop writes
    # a local URI as file:/x; file:///x would be "two different locations". A plain path is the same
    # table either way.
    location = str(local_path(path)) if str(path).startswith("file://") else path
    builder = DeltaTable.createIfNotExists(spark).location(location).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()
    return path


def ensure_late_events_table(spark: SparkSession, settings: Settings) -> str:
    """The shared late-events table (:func:`kappa.streaming.records.late_events_schema`), created if
    missing; returns its path."""
    return ensure_table(spark, str(late_events_path(settings)), late_events_schema())


@contextmanager
def delta_txn(spark: SparkSession, txn_app_id: str | None, batch_id: int):
    """Delta DML (MERGE, UPDATE, DELETE) in this block carries the transaction id (``txn_app_id``,
    ``batch_id``), so Delta skips it when that pair has already committed (Delta docs, "Idempotent
    writes": the ``spark.databricks.delta.write.txnAppId``/``txnVersion`` session settings).
    ``txn_app_id`` None: no transaction id. Use the micro-batch's own session."""
    if txn_app_id is None:
        yield
        return
    spark.conf.set("spark.databricks.delta.write.txnAppId", txn_app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def committed_txn_version(table_path: str, txn_app_id: str, settings: Settings | None,
                          *other_app_ids: str) -> int | None:
    """The latest ``txnVersion`` the Delta table at ``table_path`` recorded for ``txn_app_id`` (its
    ``txn`` actions; with ``other_app_ids``, the latest for any of them: the table is opened once),
    or None (no table, or no such writer yet)."""
    from kappa.delta.tables import is_table, open_table

    if not is_table(table_path, settings):
        return None
    table = open_table(table_path, settings)
    found = [v for i in (txn_app_id, *other_app_ids) if (v := table.transaction_version(i)) is not None]
    return max(found, default=None)


def run_for_state(batch: DataFrame) -> None:
    """Execute every partition of a micro-batch without writing it (Spark's ``noop`` sink), so the
    stateful operators that produced it commit their state store versions for the batch. For a
    foreachBatch body that skips a write it already committed: Spark 4.1 validates that every
    state store of a stateful query committed each batch (``STATE_STORE_COMMIT_VALIDATION_FAILED``)."""
    batch.write.format("noop").mode("overwrite").save()


def record_columns() -> list[Column]:
    """Where a set-aside Kafka record came from and its raw bytes, as the quarantine and
    late-events tables name them (:func:`kappa.streaming.records.quarantine_schema`): ``topic``,
    ``partition``, ``offset``, ``kafka_timestamp``, ``key``, ``value``."""
    return [F.col(c) for c in ("topic", "partition", "offset")] + [
        F.col("timestamp").alias("kafka_timestamp"), F.col("key"), F.col("value")]


def run_dml(run: Callable[[], None], what: str) -> None:
    """Run ``run``, a Delta MERGE (or UPDATE, DELETE) that builds its reads afresh on each call,
    again when Delta refuses its commit because a concurrent commit changed data it read
    (``ConcurrentAppendException``, ``ConcurrentDeleteReadException``,
    ``ConcurrentDeleteDeleteException``, ``ConcurrentWriteException``), up to :data:`DML_ATTEMPTS`
    attempts; ``what`` names it in the warning. The case it exists for is ``kappa maintain``: its
    OPTIMIZE commits while the queries run, and a MERGE that read files the OPTIMIZE rewrote is
    refused (Delta docs, "Concurrency control": OPTIMIZE can conflict with MERGE, UPDATE and
    DELETE). The refused attempt committed nothing, so running it again on the new snapshot (the
    same rows: an OPTIMIZE changes no data) is the one commit. Not retried: a schema or protocol
    change, and ``ConcurrentTransactionException`` (another writer with the same ``txnAppId``: two
    queries of one version). Raises the last conflict when every attempt conflicted."""
    from delta import exceptions as conflict

    # delta-spark's Python classes are siblings, not subclasses of DeltaConcurrentModificationException.
    retried = (conflict.ConcurrentAppendException, conflict.ConcurrentDeleteReadException,
               conflict.ConcurrentDeleteDeleteException, conflict.ConcurrentWriteException)
    for attempt in range(1, DML_ATTEMPTS + 1):
        try:
            run()
            return
        except retried as exc:
            if attempt == DML_ATTEMPTS:
                raise
            _log.warning("%s: a concurrent Delta commit conflicted (%s); retrying (%d/%d)",
                         what, type(exc).__name__, attempt, DML_ATTEMPTS - 1)


def append_with_txn(df: DataFrame, path: str, txn_app_id: str, batch_id: int, metadata: str) -> bool:
    """Append ``df`` to the existing Delta table at ``path`` as one commit carrying the transaction
    id (``txn_app_id``, ``batch_id``: a ``SetTransaction`` action) and ``metadata`` as
    ``commitInfo.userMetadata``, through Delta's transaction API (``DeltaLog.startTransaction``,
    ``writeFiles``, ``commit``) instead of the ``txnAppId``/``txnVersion`` write options.

    What it leaves out is the options' look-up of the pair (``WriteIntoDelta.hasBeenExecuted``):
    Delta 4.4 answers it from the snapshot's reconstructed state (``Snapshot.transactions``), three
    Spark jobs per append, not from the ``setTransactions`` it keeps in each ``.crc`` (measured on a
    1,000-row append in a warm session: 0.73-0.96 s and 4 jobs with the options, 0.22-0.32 s and 1
    job here). The caller must know the batch is not committed yet (:meth:`MicroBatchWriter.rerun`).
    Delta still refuses a concurrent commit of the same app id (``ConcurrentTransactionException``)
    and retries around other blind appends.

    Returns False, writing nothing, when ``df``'s columns (names and types, in order) are not the
    table's: the write options' path then enforces (or evolves) the schema as before."""
    from pyspark.sql.types import StructType

    spark = df.sparkSession
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    table = StructType.fromJson(json.loads(txn.metadata().schema().json()))
    if [(f.name, f.dataType) for f in table.fields] != [(f.name, f.dataType) for f in df.schema.fields]:
        return False
    scala = jvm.scala
    none = getattr(getattr(scala, "None$"), "MODULE$")
    files = txn.writeFiles(df._jdf)
    now = jvm.java.lang.Long(int(time.time() * 1000))
    actions = getattr(files, "$colon$plus")(delta.actions.SetTransaction(txn_app_id, batch_id, scala.Some(now)))
    operation = delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none, none,
                                            scala.Some(metadata), none, none, none, none, none)
    txn.commit(actions, operation)
    return True


def files_for(rows: int, rows_per_file: int = ROWS_PER_FILE) -> int:
    """How many files (write tasks) an append of ``rows`` rows needs: ``ceil(rows / rows_per_file)``,
    at least 1. The append coalesces its frame to that many partitions (``DataFrame.coalesce``: no
    shuffle, and never more partitions than the frame has), so a small micro-batch writes one
    file instead of one per shuffle or Kafka partition (Delta docs, "Optimizations" -> "Optimized
    write" names the small-file cost; open-source Delta's optimized write is a shuffle, this is not)."""
    return max(1, -(-rows // rows_per_file))


#: The fault point after a commit to each table a micro-batch writes (:attr:`Commit.side`; None:
#: the asset's table). The rescued-fields table has none (:data:`kappa.faults.FAULT_POINTS`).
AFTER_COMMIT = {"quarantine": "after_quarantine_commit", "late": "after_late_commit", None: "after_table_commit"}
#: The order a micro-batch's commits run in, whatever order the writer lists them: the shared side
#: tables first, the asset's table last (the re-run rule, :meth:`MicroBatchWriter.rerun`, reads it).
COMMIT_ORDER = ("quarantine", "late", "rescued", None)
#: The shared side tables a writer appends to (:meth:`MicroBatchWriter.side_commit`): side -> (the
#: table's path from the settings, its schema).
SIDE_TABLES = {"quarantine": (quarantine_path, quarantine_schema), "late": (late_events_path, late_events_schema),
               "rescued": (rescued_path, rescued_schema)}


@dataclass(frozen=True)
class Commit:
    """One Delta commit of a micro-batch, not yet made: ``side`` is the table it goes to (None: the
    asset's table; ``"quarantine"``, ``"late"``, ``"rescued"``: that shared side table, with the
    writer id ``<writer id>-<side>``), ``run`` makes it (an append or a DML statement carrying the
    batch's transaction id). Built by :meth:`MicroBatchWriter.append_commit`,
    :meth:`~MicroBatchWriter.side_commit` and :meth:`~MicroBatchWriter.dml_commit`; run by the base
    in :data:`COMMIT_ORDER`."""

    side: str | None
    run: Callable[[], None]


class RowExpectationError(KappaError, RuntimeError):
    """A ``fail`` row expectation found a violating row: the query stops before the batch writes
    anything (the message names the rule, the count and the first row's Kafka coordinates)."""


class MicroBatchWriter:
    """A ``foreachBatch`` body of one asset version (see the module docstring). Calling the writer
    runs the template: the re-run rule, then :meth:`commits` (what a subclass implements: the
    batch's rows, as commits not yet made), the commits in :data:`COMMIT_ORDER`, and a fault point
    before the first and after each."""

    #: Whether the query's Delta sources read the upstreams' change data feeds (``readChangeFeed``),
    #: which positions its provenance against (:func:`kappa.streaming.provenance.read_through`).
    change_feed = False

    def __init__(self, spec: AssetSpec, version: Version, settings: Settings):
        self.spec, self.version, self.settings = spec, version, settings
        self.fault = settings.fault
        self._provenance: tuple[int | None, str] = (None, "")  # (batch id, its userMetadata)
        self._described: tuple[int | None, list[dict]] = (None, [])  # (batch id, its provenance sources)
        self._upstream_ids: dict | None = None  # Delta table id -> upstream (asset, version, table path)
        self._sources: dict[int, list[dict]] = {}  # the last two batches' write-ahead log entries
        self._notes: tuple[int | None, dict] = (None, {})  # (batch id, what it counted: see :meth:`note`)
        self._held: list[DataFrame] = []  # frames persisted for one batch, released after it
        self._committed_at_start: tuple[int | None] | None = None  # (:meth:`last_committed` when the query started,)
        self._side_paths: dict[str, str] = {}  # side -> its shared table's path, once ensured
        self._table_seen = False  # the asset's table exists (this writer appended to it once)

    def writer_id(self, side: str | None = None) -> str:
        """The ``txnAppId`` of this version's writes to its table (``side`` None) or to a side
        table (``"quarantine"``, ``"late"``)."""
        return self.version.writer_id(side)

    def at(self, point: str, batch_id: int) -> None:
        """The fault point ``point`` of micro-batch ``batch_id`` (a no-op unless ``KAPPA_FAULT``
        names it)."""
        if self.fault is not None:
            self.fault.hit(self.spec.name, point, batch_id)

    def owner_columns(self) -> list[Column]:
        """The ``asset`` and ``version`` columns of a row this version writes to a shared table."""
        return [F.lit(self.spec.name).alias("asset"), F.lit(self.version.version).cast("int").alias("version")]

    def provenance(self, batch_id: int) -> str:
        """The ``commitInfo.userMetadata`` of every Delta commit micro-batch ``batch_id`` makes: JSON
        ``{"kappa": 1, "asset", "version", "batch_id", "sources": [...]}``, the sources being what
        the batch reads up to (:meth:`provenance_sources`), and what the batch counted
        (:meth:`note`: ``row_expectations``, silver's ``schema_drift``). Read back by
        :func:`kappa.streaming.provenance.covered`."""
        if self._provenance[0] != batch_id:
            sources = self.provenance_sources(batch_id)
            doc = {"kappa": 1, "asset": self.spec.name, "version": self.version.version, "batch_id": batch_id,
                   "sources": sources}
            if self._notes[0] == batch_id:
                doc.update(self._notes[1])
            self._provenance = (batch_id, json.dumps(doc, separators=(",", ":"), sort_keys=True))
        return self._provenance[1]

    def provenance_sources(self, batch_id: int) -> list[dict]:
        """What micro-batch ``batch_id`` reads up to, as provenance
        (:func:`kappa.streaming.provenance.describe_sources` of its write-ahead log entry; a Delta
        source as the upstream's Delta version it read through, complete or not; read as a change
        data feed when :attr:`change_feed`)."""
        from kappa.streaming.provenance import describe_sources, upstream_table_ids

        if self._described[0] != batch_id:
            sources = self.sources(batch_id)
            if any("reservoirId" in src for src in sources) and not self._upstream_ids:
                # Looked up once per query (the registry and the upstream tables are read), not per batch.
                self._upstream_ids = upstream_table_ids(self.settings, self.version)
            self._described = (batch_id, describe_sources(self.settings, self.version, sources, self._upstream_ids,
                                                          change_feed=self.change_feed))
        return self._described[1]

    @contextmanager
    def step(self, spark: SparkSession, name: str):
        """A block whose Spark jobs are described as ``<Spark's description of the micro-batch> |
        kappa step: <name>`` (:data:`STEP_MARK`), in the Spark UI and status store alike, so the
        time of a micro-batch's ``addBatch`` can be split by what the writer was doing
        (``kappa bench``'s steps, :func:`kappa.harness.bench.status.job_step`). The description is
        a property of the calling thread (the query's, in ``foreachBatch``); the one before the block is restored after it."""
        sc = spark.sparkContext
        before = sc.getLocalProperty(JOB_DESCRIPTION)
        outer = before.split(STEP_MARK, 1)[0] if before else self.version.name  # a step inside a step replaces it
        sc.setLocalProperty(JOB_DESCRIPTION, f"{outer}{STEP_MARK}{name}")
        try:
            yield
        finally:
            sc.setLocalProperty(JOB_DESCRIPTION, before)  # type: ignore[arg-type]  # None unsets it

    def last_committed(self) -> int | None:
        """The last batch id committed to the asset's table by this writer or by Delta's streaming
        sink of the same checkpoint (its ``txn`` app id is the query id; it wrote the append kinds
        before), from the table's ``txn`` actions (None: none, or no table)."""
        from kappa.streaming.checkpoint import query_id

        sink = query_id(self.version.checkpoint_path, self.settings)
        return committed_txn_version(self.version.table_path, self.writer_id(), self.settings, *([sink] if sink else []))

    def rerun(self, batch_id: int) -> bool:
        """Whether micro-batch ``batch_id`` is a re-run whose last commit (to the asset's table, the
        last in :data:`COMMIT_ORDER`) exists: its id is at or below :meth:`last_committed` as it
        stood when this query started (read at its first batch). Once per query start: Spark re-runs
        only the first batch after a restart (the one its commit log lacks), so no later batch can
        be at or below it."""
        if self._committed_at_start is None:
            self._committed_at_start = (self.last_committed(),)
        last = self._committed_at_start[0]
        return last is not None and batch_id <= last

    def side_table(self, spark: SparkSession, side: str) -> str:
        """The path of the shared side table ``side`` (a key of :data:`SIDE_TABLES`), created if
        missing (:func:`ensure_table`) once per writer."""
        if side not in self._side_paths:
            path, schema = SIDE_TABLES[side]
            self._side_paths[side] = ensure_table(spark, str(path(self.settings)), schema())
        return self._side_paths[side]

    def append_commit(self, df: DataFrame, batch_id: int, rows: int | None = None,
                      partition_by: list[str] | None = None) -> Commit:
        """The append of ``df`` to the asset's table as micro-batch ``batch_id``'s commit
        (:meth:`append`; ``rows`` and ``partition_by`` as there)."""
        return Commit(None, lambda: self.append(df, self.version.table_path, batch_id, rows=rows,
                                                partition_by=partition_by))

    def side_commit(self, df: DataFrame, side: str, batch_id: int, rows: int | None = None) -> Commit:
        """The append of ``df`` (rows of the side table's schema, :data:`SIDE_TABLES`) to the shared
        side table ``side`` as micro-batch ``batch_id``'s commit there (writer id ``<writer id>-<side>``)."""
        return Commit(side, lambda: self.append(df, self.side_table(df.sparkSession, side), batch_id, side=side,
                                                rows=rows))

    def dml_commit(self, run: Callable[[], None], batch_id: int, spark: SparkSession) -> Commit:
        """The DML ``run`` (a MERGE, UPDATE or DELETE of the asset's table, building its reads afresh
        on each call) as micro-batch ``batch_id``'s commit (:meth:`dml`: with the batch's
        transaction id and provenance, again on a conflict)."""
        return Commit(None, lambda: self.dml(run, batch_id, spark))

    def hold(self, frame: DataFrame) -> DataFrame:
        """``frame`` persisted (unless it is) until the micro-batch is done: the base unpersists it
        after the batch's commits, whatever happened."""
        if not frame.is_cached:
            frame = frame.persist()
        self._held.append(frame)
        return frame

    def append(self, df: DataFrame, path: str, batch_id: int, side: str | None = None,
               rows: int | None = None, partition_by: list[str] | None = None) -> None:
        """Append ``df`` to the Delta table at ``path`` once per (:meth:`writer_id` of ``side``,
        ``batch_id``): Delta skips a write whose pair it has already committed (Delta docs,
        "Idempotent table writes in foreachBatch"). The commit carries :meth:`provenance`.
        ``rows``, when the caller has counted them: written in :func:`files_for` files;
        ``partition_by``: the table's partition columns (Delta's ``partitionBy``)."""
        if rows is not None:
            df = df.coalesce(files_for(rows))
        metadata = self.provenance(batch_id)
        with self.step(df.sparkSession, f"append {side or 'table'}"):
            if side is None and self._committed_at_start is not None and self._table_seen:
                # The asset's table, once it exists: the re-run rule has decided this batch is new
                # (read once per query start), so Delta's own look-up of the pair is not needed.
                if append_with_txn(df, path, self.writer_id(), batch_id, metadata):
                    return
            writer = df.write.format("delta").mode("append")
            if partition_by:
                writer = writer.partitionBy(*partition_by)
            (writer.option("txnAppId", self.writer_id(side)).option("txnVersion", batch_id)
             .option("userMetadata", metadata)
             .save(path))
            if side is None:
                self._table_seen = True

    def transaction(self, spark: SparkSession, batch_id: int, side: str | None = None):
        """A block whose Delta DML carries this writer's transaction id (:func:`delta_txn`)."""
        return delta_txn(spark, self.writer_id(side), batch_id)

    def dml(self, run: Callable[[], None], batch_id: int, spark: SparkSession) -> None:
        """Run ``run``, micro-batch ``batch_id``'s MERGE (or UPDATE, DELETE) in ``spark`` (the
        micro-batch's session), through :func:`run_dml`: again on the new snapshot when a
        concurrent commit conflicts with it. Its commit carries this writer's transaction id
        (:meth:`transaction`: Delta skips it when the batch re-runs after it committed) and
        :meth:`provenance` (Delta's ``spark.databricks.delta.commitInfo.userMetadata`` session
        setting, unset afterwards)."""
        key = "spark.databricks.delta.commitInfo.userMetadata"
        spark.conf.set(key, self.provenance(batch_id))
        try:
            with self.step(spark, "merge"), self.transaction(spark, batch_id):
                run_dml(run, f"{self.version.name} batch {batch_id}")
        finally:
            spark.conf.unset(key)

    def no_new_input(self, batch_id: int) -> bool:
        """Whether micro-batch ``batch_id`` reads up to the same offsets as the batch before it (a
        no-data batch: Spark runs one after new data only to advance the watermark), from the
        write-ahead log (:func:`kappa.streaming.checkpoint.batch_sources`); False when either entry
        is missing."""
        now = self.sources(batch_id)
        return bool(now) and now == self.sources(batch_id - 1)

    def sources(self, batch_id: int) -> list[dict]:
        """What micro-batch ``batch_id`` reads up to (:func:`kappa.streaming.checkpoint.batch_sources`),
        each write-ahead log entry read once: the last two are kept (a batch and the one before it)."""
        if batch_id not in self._sources:
            from kappa.streaming.checkpoint import batch_sources

            found = batch_sources(self.version.checkpoint_path, batch_id, self.settings)
            if not found:
                return found  # not planned yet: read again next time
            self._sources = {b: v for b, v in self._sources.items() if b >= batch_id - 1}
            self._sources[batch_id] = found
        return self._sources[batch_id]

    def note(self, batch_id: int, key: str, value: dict) -> None:
        """Record ``value`` under ``key`` in the metadata of every commit micro-batch ``batch_id``
        makes (:meth:`provenance`); to be called before its first write."""
        if self._notes[0] != batch_id:
            self._notes = (batch_id, {})
        self._notes[1][key] = value

    def expect_rows(self, rows: DataFrame, batch_id: int, columns: list[str]) -> tuple[DataFrame, DataFrame | None, int]:
        """The asset's per-row expectations (:class:`kappa.spec.RowExpectation`) on ``rows``, the
        rows micro-batch ``batch_id`` is about to write to the asset's table: ``columns`` are the
        table's, and ``topic``, ``partition``, ``offset``, ``timestamp`` the Kafka record's when
        the kind reads Kafka (else absent). A row violates a rule when its ``expr`` is not true.
        One Spark job counts the rows and each rule's violations (recorded in the batch's commit
        metadata, :meth:`provenance`: ``{"rows": n, "rules": {name: {"violations", "on_violation"}}}``).

        Returns (the rows to write, ``columns`` only, less those a ``drop`` rule refuses; the
        dropped rows as quarantine rows, :func:`kappa.streaming.records.quarantine_schema`, with the
        Kafka coordinates when known, the row as JSON in ``value`` and the rules they failed in
        ``reason``, or None; how many were dropped). Raises :class:`RowExpectationError` when a
        ``fail`` rule has a violation, before anything of the batch is written. Without rules:
        ``(rows of columns, None, 0)`` and no job."""
        rules = self.spec.row_expectations
        if not rules:
            return rows.select(*columns), None, 0
        ok = {r.name: F.coalesce(F.expr(r.expr), F.lit(False)) for r in rules}
        tagged = rows.withColumns({f"_ok_{n}": c for n, c in ok.items()}).persist()
        self._held.append(tagged)
        with self.step(rows.sparkSession, "row expectations"):
            counted = tagged.agg(F.count(F.lit(1)).alias("_rows"),
                                 *[F.count_if(~F.col(f"_ok_{r.name}")).alias(r.name) for r in rules]).first()
        self.note(batch_id, "row_expectations", {"rows": counted["_rows"], "rules": {
            r.name: {"violations": counted[r.name], "on_violation": r.on_violation} for r in rules}})
        kafka = "offset" in rows.columns
        for r in rules:
            if r.on_violation == "fail" and counted[r.name]:
                first = tagged.where(~F.col(f"_ok_{r.name}"))
                first = (first.orderBy("topic", "partition", "offset").select("topic", "partition", "offset")
                         if kafka else first.select(*columns)).first()
                where = (f"topic {first['topic']} partition {first['partition']} offset {first['offset']}" if kafka
                         else json.dumps(first.asDict(), default=str))
                raise RowExpectationError(
                    f"{self.version.name} batch {batch_id}: row expectation '{r.name}' ({r.expr}) failed on "
                    f"{counted[r.name]:,} row(s), the first at {where}; the query stops and nothing of the "
                    "batch is written")
        drops = [r for r in rules if r.on_violation == "drop" and counted[r.name]]
        if not drops:
            return tagged.select(*columns), None, 0
        dropped_when = F.lit(False)
        for r in drops:
            dropped_when = dropped_when | ~F.col(f"_ok_{r.name}")
        dropped = tagged.where(dropped_when)
        n = dropped.count()
        reason = F.concat_ws("; ", *[F.when(~F.col(f"_ok_{r.name}"), F.lit(f"row expectation '{r.name}' failed: {r.expr}"))
                                     for r in drops])
        coords = ([F.col(c) for c in ("topic", "partition", "offset")] + [F.col("timestamp").alias("kafka_timestamp")]
                  if kafka else [F.lit(None).cast(t).alias(c) for c, t in (("topic", "string"), ("partition", "int"),
                                                                           ("offset", "long"), ("kafka_timestamp", "timestamp"))])
        quarantined = dropped.select(
            *self.owner_columns(), *coords, F.lit(None).cast("binary").alias("key"),
            F.to_json(F.struct(*columns)).cast("binary").alias("value"), reason.alias("reason"),
            F.current_timestamp().alias("quarantined_at"))
        return tagged.where(~dropped_when).select(*columns), quarantined, n

    def checked_rows(self, rows: DataFrame, batch_id: int) -> tuple[DataFrame, list[Commit]]:
        """:meth:`expect_rows` of a frame kind's output ``rows`` (every column the table's): (the
        rows to write, the quarantine commit of the dropped rows or none)."""
        rows, dropped, n = self.expect_rows(rows, batch_id, rows.columns)
        return rows, [] if dropped is None else [self.side_commit(dropped, "quarantine", batch_id, rows=n)]

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        """What micro-batch ``batch_id`` writes (``batch``: the query's output rows of the batch), as
        commits not yet made, at most one per table (:attr:`Commit.side`): computed here, made by the
        base after the ``before_write`` fault point, in :data:`COMMIT_ORDER`. Empty: the batch writes
        nothing (no empty commit). Frames it persists for the commits go through :meth:`hold`."""
        raise NotImplementedError

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` (the template, see the module docstring): nothing but its
        state when :meth:`rerun`, else :meth:`commits` made in :data:`COMMIT_ORDER`, with the fault
        points ``before_write``, each commit's (:data:`AFTER_COMMIT`) and ``after_batch``."""
        try:
            with self.step(batch.sparkSession, "write"):  # a subclass names its own steps inside
                if self.rerun(batch_id):
                    # Delta would skip every commit of the batch without reading it, so a stateful
                    # operator upstream would not commit its state for this batch, which Spark 4.1
                    # refuses (STATE_STORE_COMMIT_VALIDATION_FAILED). Run it, write nothing.
                    run_for_state(batch)
                else:
                    self._commit(self.commits(batch, batch_id), batch_id)
        finally:
            for frame in self._held:
                frame.unpersist()
            self._held = []
        # The batch function has returned; Spark has not yet written its commit log entry.
        self.at("after_batch", batch_id)

    def _commit(self, commits: list[Commit], batch_id: int) -> None:
        sides = [c.side for c in commits]
        unknown = [s for s in sides if s not in COMMIT_ORDER]
        if unknown or len(set(sides)) != len(sides):
            # Two commits to one table would carry one transaction id: Delta would skip the second.
            raise ValueError(f"{self.version.name} batch {batch_id}: commits to {sides}: one per table of {COMMIT_ORDER}")
        self.at("before_write", batch_id)
        for commit in sorted(commits, key=lambda c: COMMIT_ORDER.index(c.side)):
            commit.run()
            if commit.side in AFTER_COMMIT:
                self.at(AFTER_COMMIT[commit.side], batch_id)


class UpsertWriter(MicroBatchWriter):
    """Upserts each micro-batch on the asset's keys (MERGE: update matched rows, insert new ones),
    once per (writer id, batch id): Delta skips a MERGE whose transaction id it has already
    committed (Delta docs, "Idempotent writes": the ``txnAppId``/``txnVersion`` session settings
    apply to DML). The merge sink of tumbling and hopping windows (update output mode)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
                 unique_keys: bool = False):
        super().__init__(spec, version, settings)
        self.keys = spec.merge_keys
        #: A micro-batch holds at most one row per key (an update-mode aggregation grouped by the
        #: keys emits each changed group once), so the MERGE source needs no dedup; otherwise the
        #: batch is deduplicated on the keys (a MERGE refuses two source rows for one target row).
        self.unique_keys = unique_keys
        self._table_exists = False

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        from delta.tables import DeltaTable

        spark = batch.sparkSession  # the query's own session: its settings do not leak to others
        path = self.version.table_path
        if not self._table_exists:
            # The table's schema is the query's output: created from the first batch, looked for
            # once per query start.
            if not DeltaTable.isDeltaTable(spark, path):
                batch.limit(0).write.format("delta").mode("append").save(path)
            self._table_exists = True
        if batch_id > 0 and self.no_new_input(batch_id):
            # A no-data micro-batch (Spark runs one to advance the watermark: it evicts state and
            # may close windows). When it emits nothing, its MERGE would be an empty commit costing
            # seconds; the state is committed by running the batch, and the table's last commit
            # already names what it read (the same offsets).
            batch = self.hold(batch)
            if batch.count() == 0:
                return []
        rows, quarantine = self.checked_rows(batch, batch_id)
        cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.keys)

        def merge() -> None:
            (DeltaTable.forPath(spark, path).alias("t")
             .merge((rows if self.unique_keys else rows.dropDuplicates(self.keys)).alias("s"), cond)
             .whenMatchedUpdateAll()
             .whenNotMatchedInsertAll()
             .execute())

        return [*quarantine, self.dml_commit(merge, batch_id, spark)]


class AppendWriter(MicroBatchWriter):
    """Appends each micro-batch of a frame to the version's table (:meth:`MicroBatchWriter.append`:
    once per (writer id, batch id), with the batch's provenance in ``commitInfo.userMetadata``).
    The append sink of the frame kinds (raw, sql, python, join, sliding and windows in append
    mode). Delta's own streaming sink would also append each batch once (its ``txn`` action: app id
    = the query id), but it cannot give a commit per-batch metadata, so what its older commits read
    would be lost with the write-ahead log entries Spark purges (:mod:`kappa.streaming.provenance`).
    A re-run batch is the base's (:meth:`MicroBatchWriter.rerun`, which also reads the ``txn``
    actions of the Delta streaming sink that wrote the append kinds before)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        self.partition_by = list(spec.sink.partition_by)

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        rows, quarantine = self.checked_rows(batch, batch_id)
        return [*quarantine, self.append_commit(rows, batch_id, partition_by=self.partition_by)]


def frame_sink(spark: SparkSession, out: DataFrame, spec: AssetSpec, version: Version,
               settings: Settings, unique_keys: bool = False) -> DataStreamWriter:
    """The sink of a kind whose query is a frame (window, sliding, join, sql, python, raw):
    ``sink_mode: merge`` upserts each micro-batch (:class:`UpsertWriter`, the spec's output mode;
    ``unique_keys``: the frame emits at most one row per merge key in a micro-batch, so it is not
    deduplicated first); ``append`` appends it (:class:`AppendWriter`, append output mode,
    ``partition_by`` kept). Both are ``foreachBatch`` writers, so every commit carries the batch's
    provenance."""
    if spec.sink_mode == "merge":
        return out.writeStream.outputMode(spec.output_mode).foreachBatch(
            UpsertWriter(spark, spec, version, settings, unique_keys=unique_keys))
    return out.writeStream.outputMode("append").foreachBatch(AppendWriter(spark, spec, version, settings))
