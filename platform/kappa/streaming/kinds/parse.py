"""``parse`` (silver): Kafka records parsed with the declared schema, bad records quarantined, rows
deduplicated by event id, late events kept (:class:`ParseWriter`).

Each append of a micro-batch (bad records to the quarantine table, late events to the late-events
table, new rows to the asset's table) carries ``txnAppId`` = the version's writer id (a side table's
for the first two) and ``txnVersion`` = the batch id (:class:`kappa.streaming.writers.MicroBatchWriter`),
so a batch re-run after a failure is skipped where it already committed. Deduplication: within the
batch the earliest copy of an ``event_id`` in the log wins; a left anti-join on ``event_id`` against
the table (bounded by the batch's earliest event time, so Delta's data skipping reads only recent
files) drops events seen before. With a ``watermark``, a new event older than (latest event time
already in the table - delay) goes to the late-events table instead; the watermark of a batch comes
from the batches before it, as in Spark's own stateful operators. The table append is the batch's
last write, so a re-run of a batch whose table commit exists is skipped whole: its watermark,
recomputed from a table that already holds the batch, would differ.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, interval_seconds
from kappa.streaming.kinds.base import Kind
from kappa.streaming.parse import KAFKA_COLUMNS, parse_columns, row_schema
from kappa.streaming.writers import (
    MicroBatchWriter,
    ensure_late_events_table,
    ensure_quarantine_table,
    ensure_table,
    record_columns,
)


class ParseWriter(MicroBatchWriter):
    """foreachBatch body of a ``parse`` asset: quarantine bad records, keep late events, insert new
    good rows (see the module docstring). In: Kafka records (:data:`KAFKA_COLUMNS`); out: the
    declared fields, one row per ``event_id``."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        assert spec.transform.parse is not None
        self.transform = spec.transform.parse
        self.anti_join = settings.dedup_anti_join
        self.quarantine = ensure_quarantine_table(spark, settings)
        self.late = ensure_late_events_table(spark, settings)
        self.delay_s = interval_seconds(spec.watermark.delay) if spec.watermark else None
        ensure_table(spark, version.table_path, row_schema(self.transform.fields))
        # The latest event time in the table (None: empty), read once per query start and then
        # advanced by each batch (a scan of the whole table per micro-batch would make every
        # batch cost grow). It is the watermark's base, and it spares the duplicate check of a
        # batch whose events are all newer than every row in the table.
        self.latest = spark.read.format("delta").load(version.table_path).agg(
            F.max(self.transform.event_time)).first()[0]
        # The last batch whose table append committed before this query started (None: none).
        self.last_committed = self.committed(version.table_path)

    def watermark(self):
        """Latest event time of the batches before this one minus the delay (None: none yet)."""
        if self.delay_s is None or self.latest is None:
            return None
        return self.latest - timedelta(seconds=self.delay_s)

    def write(self, batch: DataFrame, batch_id: int) -> None:
        if self.last_committed is not None and batch_id <= self.last_committed:
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
            self.at("before_write", batch_id)
            if stats["bad"]:  # an empty append would still cost a Delta commit
                bad = parsed.where(~is_good).select(
                    *self.owner_columns(), *record_columns(), "reason", F.current_timestamp().alias("quarantined_at"))
                self.append(bad, self.quarantine, batch_id, side="quarantine")
                self.at("after_quarantine_commit", batch_id)
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
                    *self.owner_columns(),
                    F.col(f"r.{event_id}").alias("event_id"),
                    F.col(f"r.{event_time}").alias("event_time"),
                    F.lit(wm).cast("timestamp").alias("watermark"),
                    *record_columns(), F.current_timestamp().alias("arrived_at"))
                self.append(late, self.late, batch_id, side="late")
                self.at("after_late_commit", batch_id)
                new = new.where(~behind)
            rows = new.select(*[F.col(f"r.{f}").alias(f) for f in self.transform.fields])
            self.append(rows, self.version.table_path, batch_id)
            self.at("after_table_commit", batch_id)
            if self.latest is None or stats["latest"] > self.latest:
                self.latest = stats["latest"]
        finally:
            parsed.unpersist()


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``parse`` query: Kafka records into :class:`ParseWriter`."""
    return source.writeStream.foreachBatch(ParseWriter(spark, spec, version, settings))


def _event_id(spec: AssetSpec) -> str:
    assert spec.transform.parse is not None
    return spec.transform.parse.event_id


def _columns(spec: AssetSpec):
    assert spec.transform.parse is not None
    return dict(spec.transform.parse.fields)


KIND = Kind(name="parse", start=start, reads_kafka=True, quarantines=True, keeps_late_rows=True,
            gate_checks=("quarantine_rate",), forget="event_ids", event_id=_event_id, declared_columns=_columns)
