"""``parse`` (silver): Kafka records parsed with the declared schema, bad records quarantined, rows
deduplicated by event id, late events kept (:func:`silver_frame` into :class:`ParseWriter`).

Each append of a micro-batch (bad records to the quarantine table, late events to the late-events
table, new rows to the asset's table) carries ``txnAppId`` = the version's writer id (a side table's
for the first two) and ``txnVersion`` = the batch id (:class:`kappa.streaming.writers.MicroBatchWriter`),
so a batch re-run after a failure is skipped where it already committed. The table append is the
batch's last write, so a re-run of a batch whose table commit exists is skipped whole (the base's
re-run rule, :meth:`kappa.streaming.writers.MicroBatchWriter.rerun`: its input is still run through
the state store, which Spark 4.1 requires to commit every batch).

Deduplication, with a ``watermark`` (the shipped silver assets). The watermark W of micro-batch N
is Spark's: the latest event time of the good records of the batches before it minus the delay,
``batchWatermarkMs`` of the batch's write-ahead log entry (:func:`kappa.streaming.checkpoint.batch_watermark_ms`).

* On time (event time above the watermark of batch N - 1, W'): Spark's state store drops a copy of
  an event it has seen (``dropDuplicatesWithinWatermark`` on ``event_id``; Structured Streaming guide,
  "Streaming Deduplication"). It keeps an event until the watermark passes its event time + delay,
  so every copy above W' meets its first copy there: an on-time batch never reads the table. Of the
  rows it passes, those behind W are new late events (late-events table); the rest are new rows.
* Behind W' (Spark's state store drops such rows as late, so a second, stateless branch of the
  query passes every record too, from the same shuffle: the log is read and parsed once): the
  earliest copy in the log per
  ``event_id`` wins, and a copy of an event already in the table is a duplicate, dropped (a left
  anti-join on ``event_id``, bounded by the earliest such event time so Delta's data skipping reads
  only recent files: Delta docs, "Data skipping"). The other ones are new late events. A re-ingest
  of the whole log therefore changes nothing and adds no late event.

Copies of one event carry the same event time (a copy is the event), so they always take the same
path. Among on-time copies in one micro-batch the state store keeps the first it reads: the earliest
offset for copies in one Kafka partition read by one task.

Without a watermark nothing is late: every good record is checked against the table as above.

One pass per batch: the micro-batch (state-store rows and behind-W' rows) is evaluated once,
persisted, and the statistics, quarantine, late and new rows are read from that one evaluation.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, FieldSpec, TransformModel, interval_seconds
from kappa.spec.base import KEYS, NAME, PLAIN, check_interval, schema_shorthand
from kappa.streaming.checkpoint import batch_watermark_ms
from kappa.streaming.kinds.base import Kind
from kappa.streaming.records import (
    CORRUPT,
    KAFKA_COLUMNS,
    PERMISSIVE,
    RESCUED,
    SPARK_TYPES,
    earliest_copies,
    field_alone,
    rescued_column,
    row_schema,
    type_errors,
    wrong_type,
)
from kappa.streaming.writers import Commit, MicroBatchWriter, ensure_table, record_columns

class ParseTransform(TransformModel):
    """Silver from a topic of JSON events: each record value parsed with ``schema`` (column ->
    :class:`FieldSpec`), one row per ``event_id``. ``event_id`` and ``event_time`` must be declared,
    the latter as a ``timestamp``. A bad record (empty, over ``max_value_bytes`` bytes, not UTF-8,
    not a JSON object, a required field of the wrong type or missing, an event time more than
    ``max_future`` ahead) goes to the quarantine table with its reason (:func:`reason_column`);
    undeclared fields and optional fields of the wrong type are rescued (schema drift).
    Output: the declared columns, typed (:func:`kappa.streaming.records.row_schema`)."""

    kind = "parse"
    reads_kafka = True
    row_expectations = True

    format: Literal["json"] = "json"
    schema_: Annotated[dict[str, FieldSpec], KEYS] = Field(alias="schema", min_length=1)
    event_id: Annotated[str, NAME] = "event_id"
    event_time: Annotated[str, NAME] = "event_time"
    #: An event time further than this ahead of the processing time is bad input (a broken clock
    #: would otherwise drag the watermark into the future and make every later event late).
    max_future: Annotated[str, PLAIN] = "1 day"
    #: A record value larger than this many bytes is quarantined rather than parsed.
    max_value_bytes: int = Field(1024 * 1024, gt=0)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("max_future")
    @classmethod
    def _future(cls, v: str) -> str:
        return check_interval(v)

    _shorthand = field_validator("schema_", mode="before")(staticmethod(schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        """The declared columns, column name -> :class:`FieldSpec`, in declaration order (a copy of
        ``schema``, whose Python name is ``schema_``: pydantic's ``BaseModel`` owns ``schema``)."""
        return dict(self.schema_)

    @model_validator(mode="after")
    def _id_and_time_declared(self) -> "ParseTransform":
        fields = self.fields
        for role, name in (("event_id", self.event_id), ("event_time", self.event_time)):
            if name not in fields:
                raise ValueError(f"{role} column {name!r} is not in schema")
        if fields[self.event_time].type != "timestamp":
            raise ValueError(f"event_time column {self.event_time!r} must have type timestamp")
        return self

    def check(self, spec: AssetSpec) -> None:
        """A watermark, when declared, is on ``event_time``."""
        if spec.watermark is not None and spec.watermark.column != self.event_time:
            raise ValueError("watermark.column must equal transform.parse.event_time")

    def sink_mode(self, spec: AssetSpec) -> Literal["append", "merge"]:
        """``merge``: one row per event id."""
        return "merge"

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """``event_id``."""
        return [self.event_id]

    def row_columns(self) -> dict[str, FieldSpec]:
        """The declared columns."""
        return self.fields

    def record_event_time(self) -> str:
        """``event_time``."""
        return self.event_time


def reason_column(text: Column, value: Column, parsed: Column, transform: ParseTransform) -> Column:
    """Why a record is bad, or null when it is good (``parsed``: :func:`parse_columns`' ``r``, whose
    corrupt-record field is set when some field did not convert)."""
    fields = transform.fields
    missing = [
        F.when(parsed[name].isNull(), F.lit(name)) for name, f in fields.items() if f.required
    ]
    missing_list = F.concat_ws(", ", *missing) if missing else F.lit("")
    required = {name: (f.type, SPARK_TYPES[f.type]) for name, f in fields.items() if f.required}
    required_detail = type_errors(text, required) if required else F.lit("")
    any_wrong = F.lit(False)
    for name, f in fields.items():
        any_wrong = any_wrong | wrong_type(text, name, SPARK_TYPES[f.type])
    future = interval_seconds(transform.max_future)
    event_time = parsed[transform.event_time]
    return (
        F.when(value.isNull(), F.lit("null value"))
        .when(F.length(value) == 0, F.lit("empty value"))
        .when(F.length(value) > transform.max_value_bytes,
              F.format_string(f"value is %d bytes, over the {transform.max_value_bytes}-byte limit", F.length(value)))
        .when(~F.expr("is_valid_utf8(CAST(value AS STRING))"), F.lit("value is not valid UTF-8"))
        .when(parsed.isNull() | ~F.trim(text).startswith("{"), F.lit("not a JSON object"))
        .when(parsed[CORRUPT].isNotNull() & (required_detail != ""), required_detail)
        .when(parsed[CORRUPT].isNotNull() & ~any_wrong, F.lit("malformed JSON"))
        .when(missing_list != "", F.concat(F.lit("missing required field(s): "), missing_list))
        .when(event_time > F.current_timestamp() + F.expr(f"INTERVAL {int(future)} SECONDS"),
              F.concat(F.lit(f"{transform.event_time} is more than {transform.max_future} in the future: "),
                       event_time.cast("string")))
    )


def parse_columns(kafka_df: DataFrame, transform: ParseTransform) -> DataFrame:
    """Add ``r`` (parsed struct), ``reason`` (null = good) and ``_rescued`` (:func:`rescued_column`)
    to a frame of Kafka records. A record the whole-object parse cannot type (its corrupt-record
    field set) is parsed again field by field, so an optional field of the wrong type is null in
    ``r`` and its value rescued while the other fields keep theirs."""
    fields = transform.fields
    schema = row_schema(fields).add(T.StructField(CORRUPT, T.StringType(), True))
    text = F.col("value").cast("string")
    whole = F.col("_whole")  # one whole-object parse per record, read below by name
    by_field = F.struct(*[field_alone(text, name, SPARK_TYPES[f.type]).alias(name) for name, f in fields.items()],
                        whole[CORRUPT].alias(CORRUPT))
    optional = [name for name, f in fields.items() if not f.required]
    mistyped = F.when(whole[CORRUPT].isNotNull(), F.filter(
        F.array(*[F.when(wrong_type(text, name, SPARK_TYPES[fields[name].type]), F.lit(name)) for name in optional]),
        lambda n: n.isNotNull())) if optional else None
    return (kafka_df.withColumn("_whole", F.from_json(text, schema, PERMISSIVE))
            .withColumn("r", F.when(whole.isNull() | whole[CORRUPT].isNull(), whole).otherwise(by_field))
            .withColumn("reason", reason_column(text, F.col("value"), F.col("r"), transform))
            .withColumn(RESCUED, rescued_column(text, list(fields), mistyped))
            .drop("_whole"))


#: Which branch of :func:`silver_frame` a row came through: ``state`` (every record, parsed, less
#: the on-time copies the state store dropped and the good records behind W') or ``behind`` (every
#: record again, with only its event time parsed; the writer keeps those behind W').
PATH, STATE, BEHIND = "_path", "state", "behind"
#: The good record's event time (null for a bad one) in :func:`silver_frame`'s output.
EVENT_TIME = "_et"


def silver_frame(source: DataFrame, spec: AssetSpec) -> DataFrame:
    """The query of a ``parse`` asset before its writer. In: Kafka records (:data:`KAFKA_COLUMNS`).
    Out: ``_path`` (:data:`STATE` or :data:`BEHIND`), ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``key`` and ``value`` (binary; on the state path only for bad records), ``r``
    (the parsed struct), ``reason`` (null: good), ``_rescued`` (undeclared fields as JSON; good
    records only), ``_et`` (the good record's event time).

    With a watermark, the state path deduplicates by ``event_id`` in the state store within the
    watermark; bad records pass it under a key of their own and a null event time (Spark neither
    drops nor keeps them: a null is never behind the watermark and expires at once). The records
    are parsed once and hash-partitioned by that key once; the behind path reads the same shuffle
    output (Spark reuses an exchange two branches compute alike: ``ReusedExchange`` in the plan),
    so the micro-batch reads each Kafka record once. Without a watermark, every record takes the
    state path with no state."""
    t = ParseTransform.of(spec)
    parsed = parse_columns(source.select(*KAFKA_COLUMNS), t)
    good = F.col("reason").isNull()
    rows = parsed.select(
        "topic", "partition", "offset", "timestamp", "key", "value",
        "r", "reason", F.when(good, F.col(RESCUED)).alias(RESCUED), F.when(good, F.col(f"r.{t.event_time}")).alias(EVENT_TIME),
        F.when(good, F.col(f"r.{t.event_id}").cast("string"))
        .otherwise(F.concat_ws(":", F.lit("\u0000bad"), "topic", "partition", "offset")).alias("_id"))
    if spec.watermark is None:
        return rows.select(*_state_columns(good))
    # One read of the log: the records are hash-partitioned by event id once, as the state store
    # needs them, and both branches read that one shuffle, the behind branch without passing the
    # state store. The watermark goes below the shuffle: above it, the state store would not
    # recognise the partitioning and would shuffle again. (Replay of 636,776 events, one
    # micro-batch: 30.0 / 30.4 s reading the log twice, 25.1 / 28.5 s once.)
    rows = rows.withWatermark(EVENT_TIME, spec.watermark.delay).repartition("_id")
    state = rows.dropDuplicatesWithinWatermark(["_id"])
    behind = rows.drop("_id").withColumn(PATH, F.lit(BEHIND))
    return state.select(*_state_columns(good)).unionByName(behind)


def _state_columns(good: Column) -> list[Column]:
    """The state path's columns: a good record's raw bytes are dropped (its parsed row is kept)."""
    return [F.col(c) for c in ("topic", "partition", "offset", "timestamp")] + [
        F.when(~good, F.col("key")).alias("key"), F.when(~good, F.col("value")).alias("value"),
        F.col("r"), F.col("reason"), F.col(RESCUED), F.col(EVENT_TIME), F.lit(STATE).alias(PATH)]


class ParseWriter(MicroBatchWriter):
    """foreachBatch body of a ``parse`` asset: quarantine bad records, keep late events, insert new
    good rows (see the module docstring). In: :func:`silver_frame`; out: the declared fields, one
    row per ``event_id``."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        self.transform = ParseTransform.of(spec)
        self.anti_join = settings.dedup_anti_join
        self.side_table(spark, "quarantine")
        self.side_table(spark, "late")
        self.stateful = spec.watermark is not None
        ensure_table(spark, version.table_path, row_schema(self.transform.fields))
        self._watermark: tuple[int, int] | None = None  # (batch id, its watermark in ms)

    def watermarks(self, batch_id: int) -> tuple[int, int]:
        """(W', W) of micro-batch ``batch_id`` in epoch ms: the watermark of the batch before it (the
        state store drops good records at or behind it; 0 for batch 0) and its own (rows behind it
        are late), from the write-ahead log (:func:`kappa.streaming.checkpoint.batch_watermark_ms`)."""
        cp = self.version.checkpoint_path
        current = batch_watermark_ms(cp, batch_id, self.settings)
        if batch_id == 0:
            before = 0
        elif self._watermark is not None and self._watermark[0] == batch_id - 1:
            before = self._watermark[1]
        else:
            before = batch_watermark_ms(cp, batch_id - 1, self.settings)
        if current is None or before is None:
            raise RuntimeError(f"{self.version.name} batch {batch_id}: no watermark in {cp}/offsets")
        self._watermark = (batch_id, current)
        return before, current

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        et, eid = F.col(EVENT_TIME), self.transform.event_id
        on_state, is_good = F.col(PATH) == STATE, F.col("reason").isNull()
        coords = ["topic", "partition", "offset"]
        if self.stateful:
            w_before, w_now = self.watermarks(batch_id)
            watermark, before = F.timestamp_millis(F.lit(w_now)), F.timestamp_millis(F.lit(w_before))
            behind_now = F.coalesce(et < watermark, F.lit(False))
            # Pushed into the union's behind branch: only its records at or behind W are kept
            # (Spark's state store drops a record at or behind W' <= W: its late-events predicate is
            # event time <= watermark, WatermarkSupport.watermarkExpression). Those at or behind W'
            # are checked against the table; the others only lend their raw bytes to the state
            # path's late rows (which carries a good record's parsed row, not its bytes).
            frame = batch.where(on_state | (et <= watermark))
            checked, lender = ~on_state & (et <= before), ~on_state & (et > before)
        else:  # nothing is late; every good record is checked against the table
            watermark, behind_now, frame = None, F.lit(False), batch
            checked, lender = is_good, F.lit(False)
        fresh = on_state & is_good & ~behind_now if self.stateful else F.lit(False)
        frame = self.hold(frame)
        new = None
        spark = batch.sparkSession
        with self.step(spark, "evaluate"):  # the Kafka read, parse and state store, persisted once
            stats = frame.agg(
                F.count_if(on_state & ~is_good).alias("bad"),
                F.count_if(on_state & is_good & behind_now).alias("late"),
                F.count_if(fresh).alias("fresh"),
                F.count_if(fresh & F.col(RESCUED).isNotNull()).alias("rescued"),
                F.count_if(checked).alias("checked"),
                F.min(F.when(checked, et)).alias("earliest"),
            ).first()
        n_late, n_new, n_rescued, late = stats["late"], stats["fresh"], stats["rescued"], []
        if n_late:  # new events behind W that the state store passed: their bytes from the lender rows
            late.append(frame.where(on_state & is_good & behind_now).drop("key", "value")
                        .join(frame.where(lender).select(*coords, "key", "value"), coords))
        if stats["checked"]:
            with self.step(spark, "check behind the watermark"):  # the anti-join against the table
                new = self.hold(self._new_events(frame.where(checked), stats["earliest"]))
                counts = new.agg(F.count_if(behind_now).alias("late"), F.count_if(~behind_now).alias("new"),
                                 F.count_if(~behind_now & F.col(RESCUED).isNotNull()).alias("rescued")).first()
            n_late, n_new = n_late + counts["late"], n_new + counts["new"]
            n_rescued += counts["rescued"]
            late.append(new.where(behind_now))
        fields = list(self.transform.fields)
        rows, dropped, n_dropped, rescued = None, None, 0, None
        if n_new:  # the new rows, held to the row expectations before anything is written
            rows = frame.where(fresh)
            if new is not None:
                rows = rows.unionByName(new.where(~behind_now))
            if n_rescued:  # schema drift: fields the declaration lacks, kept and counted per field
                rescued = self._rescued(rows, batch_id, n_rescued)
            rows, dropped, n_dropped = self.expect_rows(
                rows.select(*[F.col(f"r.{f}").alias(f) for f in fields], *coords, "timestamp"), batch_id, fields)
            n_new -= n_dropped
        commits = []
        if stats["bad"] or n_dropped:  # an empty append would still cost a Delta commit
            bad = frame.where(on_state & ~is_good).select(
                *self.owner_columns(), *record_columns(), "reason", F.current_timestamp().alias("quarantined_at"))
            if dropped is not None:
                bad = bad.unionByName(dropped)
            commits.append(self.side_commit(bad, "quarantine", batch_id, rows=stats["bad"] + n_dropped))
        if n_late:
            rows_late = late[0] if len(late) == 1 else late[0].unionByName(late[1])
            commits.append(self.side_commit(rows_late.select(
                *self.owner_columns(), F.col(f"r.{eid}").alias("event_id"), et.alias("event_time"),
                watermark.cast("timestamp").alias("watermark"),
                *record_columns(), F.current_timestamp().alias("arrived_at")), "late", batch_id, rows=n_late))
        if rescued is not None:
            commits.append(self.side_commit(rescued, "rescued", batch_id, rows=n_rescued))
        if n_new:  # nothing new (every record a duplicate, bad, late or dropped): no empty commit
            commits.append(self.append_commit(rows, batch_id, rows=n_new))
        return commits

    def _rescued(self, rows: DataFrame, batch_id: int, n: int) -> DataFrame:
        """Of the batch's new ``rows`` (:func:`silver_frame`'s columns), the ``n`` whose records carry
        undeclared fields, as rows of the rescued-fields table; counts each such field once per
        record into the batch's commit metadata (``schema_drift``: ``{"rows": n, "fields": {name:
        records}}``, :meth:`note`): one small job over those rows."""
        with_fields = rows.where(F.col(RESCUED).isNotNull())
        keys = F.map_keys(F.from_json(F.col(RESCUED), T.MapType(T.StringType(), T.StringType())))
        counted = with_fields.select(F.explode(keys).alias("f")).groupBy("f").count().collect()
        self.note(batch_id, "schema_drift", {"rows": n, "fields": {r["f"]: r["count"] for r in sorted(counted)}})
        return with_fields.select(
            *self.owner_columns(), F.col(f"r.{self.transform.event_id}").cast("string").alias("event_id"),
            "topic", "partition", "offset", F.col(RESCUED).alias("fields"), F.lit(batch_id).cast("long").alias("batch_id"),
            F.current_timestamp().alias("rescued_at"))

    def _new_events(self, checked: DataFrame, earliest) -> DataFrame:
        """Of ``checked`` (rows of :func:`silver_frame` whose records must be checked against the
        table), the good records whose event is new: the earliest copy in the log per event id, and
        none already in the table (unless ``KAPPA_DEDUP_ANTI_JOIN`` is off). Persisted (the caller
        unpersists it): its late and on-time rows are read apart. Same columns as ``checked``."""
        t = self.transform
        eid, et = t.event_id, t.event_time
        checked = checked.where(F.col("reason").isNull())
        new = earliest_copies(checked, eid)
        if self.anti_join:
            # A copy of an event can only match a row at or after the earliest event time checked
            # (an event's time is part of the event): Delta skips every older file by its min/max
            # statistics, so the read follows the batch, not the table.
            seen = (checked.sparkSession.read.format("delta").load(self.version.table_path)
                    .where(F.col(et) >= F.lit(earliest)).select(F.col(eid).alias("_seen")))
            new = new.join(seen, F.col(f"r.{eid}") == F.col("_seen"), "left_anti")
        return new.persist()


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``parse`` query: :func:`silver_frame` of the Kafka records into :class:`ParseWriter`."""
    return silver_frame(source, spec).writeStream.foreachBatch(ParseWriter(spark, spec, version, settings))


def _event_id(spec: AssetSpec) -> str:
    return ParseTransform.of(spec).event_id


def _columns(spec: AssetSpec):
    return dict(ParseTransform.of(spec).fields)


KIND = Kind(model=ParseTransform, start=start, quarantines=True, keeps_late_rows=True,
            gate_checks=("quarantine_rate", "schema_drift"), forget="event_ids", event_id=_event_id, declared_columns=_columns,
            # a watermark bounds its deduplication state (dropDuplicatesWithinWatermark, keyed by
            # event id) and only evicts it: no no-data micro-batches
            stateful=lambda spec: spec.watermark is not None, no_data_batches=lambda spec: False,
            parse_records=lambda df, spec: parse_columns(df, ParseTransform.of(spec)))
