"""Building and starting the Structured Streaming query of one asset version.

Exactly-once effects come from the checkpoint plus idempotent sinks (Spark's Structured Streaming
guide, "Fault Tolerance Semantics"; Delta docs, "Idempotent table writes in foreachBatch"):

* ``raw`` (bronze): Delta's streaming sink, which records each micro-batch id in the Delta log and
  skips a batch it has already committed.
* ``parse`` (silver): ``foreachBatch``. Each of its appends (bad records to the quarantine table,
  late events to the late-events table, new rows to the asset's table) carries ``txnAppId`` = the
  version's writer id and ``txnVersion`` = the batch id, so a batch re-run after a failure is
  skipped where it already committed. Deduplication: within the batch the earliest copy of an
  ``event_id`` in the log wins; a left anti-join on ``event_id`` against the table (bounded by the
  batch's earliest event time, so Delta's data skipping reads only recent files) drops events seen
  before. With a ``watermark``, a new event older than (latest event time already in the table -
  delay) goes to the late-events table instead; the watermark of a batch comes from the batches
  before it, as in Spark's own stateful operators. The table append is the batch's last write, so a
  re-run of a batch whose table commit exists is skipped whole: its watermark, recomputed from a
  table that already holds the batch, would differ.
* ``window`` (gold): Spark's stateful window aggregation with a watermark in ``update`` output mode;
  each micro-batch's updated windows are upserted with ``MERGE`` on (group-by keys, window_start),
  so the table always holds every window's current value, including windows still open. The MERGE
  carries the same transaction id (Delta's ``spark.databricks.delta.write.txnAppId``/``txnVersion``
  session settings for DML), so a re-run batch is skipped where it already committed.

* ``pattern`` (gold, CEP): ``foreachBatch`` (:class:`kappa.streaming.pattern.PatternWriter`): late
  rows to the late-events table, then the matches, each append with the version's transaction id.

* ``lookup`` (stream–table join) and ``materialized_view`` (table–table join): ``foreachBatch``
  (:mod:`kappa.streaming.table_joins`), an append or a MERGE with the version's transaction id.

* Session windows, stream–stream joins and sliding windows run in ``append`` mode into Delta's
  streaming sink: a row is written once, when the watermark makes it final
  (:mod:`kappa.streaming.windows`, :mod:`kappa.streaming.joins`).

``KAPPA_FAULT`` (:class:`kappa.config.Fault`) stops the process at a named point of a micro-batch
of the foreachBatch writers; the fault-point tests use it to prove the above at every gap.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from kappa.config import Fault, Settings
from kappa.delta.registry import Registry, Version, late_events_path, quarantine_path
from kappa.forget import forgotten_condition
from kappa.spec import AssetSpec, interval_seconds
from kappa.streaming.joins import join_frame
from kappa.storage import delta_rs_uri, local_path
from kappa.streaming.parse import late_events_schema, parse_columns, quarantine_schema, row_schema
from kappa.streaming.windows import sliding_frame, window_frame

TriggerMode = Literal["available_now", "continuous"]

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]


@dataclass
class RunningQuery:
    spec: AssetSpec
    version: Version
    query: StreamingQuery


def query_name(asset: str, version: int) -> str:
    return f"{asset}_v{version}"


def read_source(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings) -> DataFrame:
    """The input stream of ``spec``: the Kafka topics from their earliest offsets, or the upstream
    version's Delta table. Kafka columns: key, value (binary), topic, partition, offset, timestamp,
    timestampType, headers."""
    if spec.source.kafka is not None:
        src = spec.source.kafka
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.bootstrap_servers)
            .option("subscribe", ",".join(src.topics))
            # Every version reads the whole retained log; a gap in it must fail, not be skipped.
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "true")
            .option("includeHeaders", "true")
            .option("groupIdPrefix", settings.kafka_group_id_prefix or f"kappa-{spec.name}-v{version.version}-")
        )
        for key, value in settings.kafka_client_options().items():
            reader = reader.option(f"kafka.{key}", value)
        if src.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", src.max_offsets_per_trigger)
        records = reader.load()
        # Keys forgotten by `kappa forget` never enter a table again (read once per query start).
        forgotten = forgotten_condition(settings, list(src.topics))
        return records if forgotten is None else records.where(~forgotten)
    assert spec.source.asset is not None
    return upstream_stream(spark, version, settings, spec.source.asset)


def upstream_stream(spark: SparkSession, version: Version, settings: Settings, upstream: str) -> DataFrame:
    """The Delta table of the ``upstream`` asset's version pinned by ``version``, as a stream."""
    path = Registry(settings).upstream_of(version, upstream).table_path
    # A forget DELETEs rows from the upstream table; a running version keeps its results (the
    # forget replays the promoted aggregates) instead of failing on the non-append commit.
    return spark.readStream.format("delta").option("skipChangeCommits", "true").load(str(path))


def _ensure_table(spark: SparkSession, path: str, schema, properties: dict[str, str] | None = None) -> str:
    """Create the Delta table at ``path`` with ``schema`` (and table ``properties``) unless it exists."""
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


def ensure_quarantine_table(spark: SparkSession, settings: Settings) -> str:
    return _ensure_table(spark, str(quarantine_path(settings)), quarantine_schema())


def _record_columns() -> list[Column]:
    """Where a set-aside Kafka record came from and its raw bytes, as the quarantine and
    late-events tables name them (:func:`kappa.streaming.parse.quarantine_schema`)."""
    return [F.col(c) for c in ("topic", "partition", "offset")] + [
        F.col("timestamp").alias("kafka_timestamp"), F.col("key"), F.col("value")]


class ParseWriter:
    """foreachBatch body of a ``parse`` asset: quarantine bad records, insert new good ones."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        assert spec.transform.parse is not None
        self.spec, self.version = spec, version
        self.transform = spec.transform.parse
        self.fault, self.anti_join = settings.fault, settings.dedup_anti_join
        self.quarantine = ensure_quarantine_table(spark, settings)
        self.late = _ensure_table(spark, str(late_events_path(settings)), late_events_schema())
        self.delay_s = interval_seconds(spec.watermark.delay) if spec.watermark else None
        _ensure_table(spark, version.table_path, row_schema(self.transform.fields))
        # The latest event time in the table (None: empty), read once per query start and then
        # advanced by each batch (a scan of the whole table per micro-batch would make every
        # batch cost grow). It is the watermark's base, and it spares the duplicate check of a
        # batch whose events are all newer than every row in the table.
        self.latest = spark.read.format("delta").load(version.table_path).agg(
            F.max(self.transform.event_time)).first()[0]
        # The last batch whose table append committed before this query started (None: none).
        self.committed = committed_txn_version(version.table_path, version.txn_app_id)

    def watermark(self):
        """Latest event time of the batches before this one minus the delay (None: none yet)."""
        if self.delay_s is None or self.latest is None:
            return None
        return self.latest - timedelta(seconds=self.delay_s)

    def _at(self, point: str, batch_id: int) -> None:
        if self.fault is not None:
            self.fault.hit(self.spec.name, point, batch_id)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.committed is not None and batch_id <= self.committed:
            # Re-run of a batch whose table append (its last write) committed before a crash.
            return
        spark = batch.sparkSession
        event_id, event_time = self.transform.event_id, self.transform.event_time
        is_good = F.col("reason").isNull()
        good_time = F.when(is_good, F.col(f"r.{event_time}"))
        wm = self.watermark()
        behind = F.col(f"r.{event_time}") < F.lit(wm) if wm is not None else F.lit(False)
        # Persisted once, read by every write below. The raw key and value are kept only for the
        # records that may be set aside (bad, or behind the watermark): most of a record's bytes
        # need not be cached twice (raw and parsed).
        set_aside = ~is_good | behind
        parsed = parse_columns(batch.select(*KAFKA_COLUMNS), self.transform).select(
            "topic", "partition", "offset", "timestamp", "r", "reason",
            F.when(set_aside, F.col("key")).alias("key"), F.when(set_aside, F.col("value")).alias("value"),
        ).persist()
        try:
            stats = parsed.agg(
                F.count_if(~is_good).alias("bad"),
                F.min(good_time).alias("earliest"),
                F.max(good_time).alias("latest"),
                F.count_if(is_good & behind).alias("behind"),
            ).first()
            self._at("before_write", batch_id)
            if stats["bad"]:  # an empty append would still cost a Delta commit
                bad = parsed.where(~is_good).select(
                    *self._owner(), *_record_columns(), "reason", F.current_timestamp().alias("quarantined_at"))
                self._append(bad, self.quarantine, f"{self.version.txn_app_id}-quarantine", batch_id)
                self._at("after_quarantine_commit", batch_id)
            if stats["earliest"] is None:
                return  # no good record in this batch

            # One row per event_id: the earliest copy in the log wins, so every version (and a
            # replay of the whole log in one batch) keeps the same copy.
            first = Window.partitionBy(F.col(f"r.{event_id}")).orderBy("topic", "partition", "offset")
            good = parsed.where(is_good).withColumn("_n", F.row_number().over(first)).where("_n = 1")
            # Events already in the table are duplicates. An event's time is part of the event, so a
            # copy of an event in this batch can only match a row at or after the batch's earliest
            # event time: when that is later than the table's latest, nothing can match and the
            # table is not read; otherwise the bound lets Delta skip every older file by its min/max
            # statistics (Delta docs, "Data skipping"), so a micro-batch's cost follows the batch,
            # not the table.
            new = good
            if self.anti_join and self.latest is not None and stats["earliest"] <= self.latest:
                seen = (spark.read.format("delta").load(self.version.table_path)
                        .where(F.col(event_time) >= F.lit(stats["earliest"]))
                        .select(F.col(event_id).alias("_seen")))
                new = good.join(seen, F.col(f"r.{event_id}") == F.col("_seen"), "left_anti")
            if stats["behind"]:
                # New, but behind the watermark: late, kept in the late-events table.
                late = new.where(behind).select(
                    *self._owner(),
                    F.col(f"r.{event_id}").alias("event_id"),
                    F.col(f"r.{event_time}").alias("event_time"),
                    F.lit(wm).cast("timestamp").alias("watermark"),
                    *_record_columns(), F.current_timestamp().alias("arrived_at"))
                self._append(late, self.late, f"{self.version.txn_app_id}-late", batch_id)
                self._at("after_late_commit", batch_id)
                new = new.where(~behind)
            rows = new.select(*[F.col(f"r.{f}").alias(f) for f in self.transform.fields])
            self._append(rows, self.version.table_path, self.version.txn_app_id, batch_id)
            self._at("after_table_commit", batch_id)
            if self.latest is None or stats["latest"] > self.latest:
                self.latest = stats["latest"]
        finally:
            parsed.unpersist()

    def _owner(self) -> list[Column]:
        """The ``asset`` and ``version`` columns of a record this version sets aside."""
        return [F.lit(self.spec.name).alias("asset"), F.lit(self.version.version).cast("int").alias("version")]

    @staticmethod
    def _append(df: DataFrame, path: str, txn_app_id: str, batch_id: int) -> None:
        """Append ``df`` to the Delta table at ``path`` once per (``txn_app_id``, ``batch_id``): Delta
        records the pair in its log and skips a write whose batch id it has already committed
        (Delta docs, "Idempotent table writes in foreachBatch")."""
        (df.write.format("delta").mode("append")
         .option("txnAppId", txn_app_id).option("txnVersion", batch_id)
         .save(path))


def committed_txn_version(table_path: str, txn_app_id: str) -> int | None:
    """The latest ``txnVersion`` the Delta table at ``table_path`` recorded for ``txn_app_id``
    (its ``txn`` actions), or None (no table, or no such writer yet)."""
    from deltalake import DeltaTable as RsTable

    uri = delta_rs_uri(table_path)
    if not RsTable.is_deltatable(uri):
        return None
    return RsTable(uri).transaction_version(txn_app_id)


class UpsertWriter:
    """foreachBatch body that upserts each micro-batch on ``keys`` (MERGE: update matched rows,
    insert new ones), once per (``txn_app_id``, batch id): Delta skips a MERGE whose transaction id
    it has already committed (Delta docs, "Idempotent writes": the ``txnAppId``/``txnVersion``
    session settings apply to DML). ``txn_app_id`` None: no transaction id (values are idempotent
    anyway, only the commit is repeated)."""

    def __init__(self, table_path: str, keys: list[str], txn_app_id: str | None = None,
                 asset: str = "", fault: Fault | None = None):
        self.table_path, self.keys, self.txn_app_id = table_path, keys, txn_app_id
        self.asset, self.fault = asset, fault
        #: Only the first batch a query runs can be a re-run (Spark re-runs the one batch its commit
        #: log lacks, first, on restart); later batches skip the look at the Delta log.
        self._first_batch = True

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from delta.tables import DeltaTable

        spark = batch.sparkSession  # the query's own session: its settings do not leak to others
        if not DeltaTable.isDeltaTable(spark, self.table_path):
            batch.limit(0).write.format("delta").mode("append").save(self.table_path)
        cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.keys)
        if self.fault is not None:
            self.fault.hit(self.asset, "before_write", batch_id)
        first, self._first_batch = self._first_batch, False
        committed = committed_txn_version(self.table_path, self.txn_app_id) if first and self.txn_app_id else None
        if committed is not None and committed >= batch_id:
            # A re-run of a batch whose MERGE committed (killed before Spark's commit log entry).
            # Delta would skip the MERGE without reading the batch, so the stateful operator
            # upstream (the window aggregation) would not commit its state for this batch, which
            # Spark 4.1 refuses (STATE_STORE_COMMIT_VALIDATION_FAILED: "expected 2 commits but got
            # 0"). Run the batch into the noop sink: the state is committed, nothing is written.
            run_for_state(batch)
            return
        with delta_txn(spark, self.txn_app_id, batch_id):
            (DeltaTable.forPath(spark, self.table_path).alias("t")
             .merge(batch.dropDuplicates(self.keys).alias("s"), cond)
             .whenMatchedUpdateAll()
             .whenNotMatchedInsertAll()
             .execute())
        if self.fault is not None:
            self.fault.hit(self.asset, "after_table_commit", batch_id)


def run_for_state(batch: DataFrame) -> None:
    """Execute every partition of a micro-batch without writing it (Spark's ``noop`` sink), so the
    stateful operators that produced it commit their state store versions for the batch. For a
    foreachBatch body that skips a write it already committed: Spark 4.1 validates that every
    state store of a stateful query committed each batch (``STATE_STORE_COMMIT_VALIDATION_FAILED``)."""
    batch.write.format("noop").mode("overwrite").save()


def with_after_batch(writer, asset: str, fault: Fault | None):
    """``writer`` (a foreachBatch function), stopping at ``after_batch`` when ``fault`` names it:
    the batch function has returned, Spark has not yet written its commit log entry."""
    if fault is None or fault.asset != asset:
        return writer

    def run(batch: DataFrame, batch_id: int) -> None:
        writer(batch, batch_id)
        fault.hit(asset, "after_batch", batch_id)

    return run


def _load_python_transform(spec: AssetSpec):
    assert spec.transform.python is not None and spec.path is not None
    module_file, _, func = spec.transform.python.partition(":")
    path = Path(spec.path).parent / module_file
    mod_spec = importlib.util.spec_from_file_location(f"kappa_asset_{spec.name}", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, func)


def transformed(spark: SparkSession, df: DataFrame, spec: AssetSpec,
                version: Version | None = None, settings: Settings | None = None) -> DataFrame:
    """The output stream for every transform but ``parse`` (``version`` and ``settings`` locate a
    join's right side)."""
    kind = spec.transform.kind
    if kind == "raw":
        return df.select(*KAFKA_COLUMNS)
    if kind == "window":
        return window_frame(df, spec)
    if kind == "sliding":
        return sliding_frame(df, spec)
    if kind == "join":
        assert spec.transform.join is not None and version is not None and settings is not None
        return join_frame(df, upstream_stream(spark, version, settings, spec.transform.join.right.asset), spec)
    if kind == "pattern":
        from kappa.streaming.pattern import pattern_frame

        return pattern_frame(df, spec)
    if kind == "sql":
        df.createOrReplaceTempView("input")
        return spark.sql(spec.transform.sql)  # type: ignore[arg-type]
    if kind == "python":
        return _load_python_transform(spec)(df)
    raise ValueError(f"{spec.name}: transform {kind!r} has no stream builder")


def start_query(
    spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings, mode: TriggerMode
) -> RunningQuery:
    """Start the streaming query of one asset version and return it running.

    ``available_now`` processes everything available at start and stops (Spark's
    ``Trigger.AvailableNow``); ``continuous`` runs micro-batches every ``trigger.processing_time``
    until stopped."""
    source = read_source(spark, spec, version, settings)
    if spec.transform.kind == "parse":
        out = source
        writer = out.writeStream.foreachBatch(
            with_after_batch(ParseWriter(spark, spec, version, settings), spec.name, settings.fault))
    elif spec.transform.kind == "changelog":
        from kappa.streaming.changelog import ChangelogWriter

        writer = source.writeStream.foreachBatch(
            with_after_batch(ChangelogWriter(spark, spec, version, settings), spec.name, settings.fault))
    elif spec.transform.kind in ("lookup", "materialized_view"):
        from kappa.streaming.table_joins import LookupWriter, ViewWriter, view_changes

        if spec.transform.kind == "lookup":
            body, stream = LookupWriter(spark, spec, version, settings), source
        else:
            body, stream = ViewWriter(spark, spec, version, settings), view_changes(spark, spec, version, settings)
        writer = stream.writeStream.foreachBatch(with_after_batch(body, spec.name, settings.fault))
    elif spec.transform.kind == "pattern":
        from kappa.streaming.pattern import PatternWriter

        late = _ensure_table(spark, str(late_events_path(settings)), late_events_schema())
        writer = transformed(spark, source, spec).writeStream.outputMode("append").foreachBatch(
            with_after_batch(PatternWriter(spark, spec, version, late, settings.fault), spec.name, settings.fault))
    else:
        out = transformed(spark, source, spec, version, settings)
        if spec.sink_mode == "merge":
            output_mode = spec.output_mode
            writer = out.writeStream.outputMode(output_mode).foreachBatch(with_after_batch(
                UpsertWriter(version.table_path, spec.merge_keys, version.txn_app_id, spec.name, settings.fault),
                spec.name, settings.fault))
        else:
            writer = out.writeStream.format("delta").outputMode("append").option("path", version.table_path)
            if spec.sink.partition_by:
                writer = writer.partitionBy(*spec.sink.partition_by)
    writer = writer.queryName(query_name(spec.name, version.version)).option(
        "checkpointLocation", version.checkpoint_path
    )
    if mode == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.trigger.processing_time)
    return RunningQuery(spec=spec, version=version, query=writer.start())
