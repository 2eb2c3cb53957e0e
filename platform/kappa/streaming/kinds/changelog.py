"""``changelog`` (silver from a Debezium changelog topic, :class:`ChangelogTransform`): Debezium change events folded into a current-state table or
an SCD2 history (DDIA ch. 11, "State, Streams, and Immutability"; Kimball's slowly changing
dimension type 2).

Input: the Kafka source's columns. Record key: the source row's primary key as JSON
(``{"tailnum": "N10156"}``); value: Debezium's change event as plain JSON (``op`` = ``r`` snapshot
read / ``c`` insert / ``u`` update / ``d`` delete, ``after`` = the row after the change, ``source.lsn``
= the change's position in PostgreSQL's write-ahead log, ``source.ts_ms`` = its commit time in
epoch ms), or null (a tombstone, written right after a delete). Source order is LSN order
(Debezium PostgreSQL connector docs, "Change events").

A record that is not a change event, has an unknown ``op``, a row image whose field does not
convert to the declared type, lacks a required field, or carries a non-null value in a column the
schema does not declare (a column added in the source with ``ALTER TABLE … ADD COLUMN``: declare it
and replay) goes to the quarantine table with its raw bytes, coordinates and the reason. A column
added in the source whose value is null loses nothing and flows through.

``mode: current`` — output: the declared columns, ``_lsn`` (long) and ``_changed_at`` (timestamp,
source commit time). Each micro-batch keeps the latest change per key (highest LSN, then offset) and
applies it with one ``MERGE``: an insert/update/read replaces the row only when its LSN is higher
than the row's ``_lsn``, a delete removes it when its LSN is at least the row's. A change already
applied (a restart, or Debezium re-sending after a crash) therefore changes nothing. A tombstone is a
delete too: on a compacted topic it may be all that is left of a delete (compaction keeps the latest
record per key, and the tombstone supersedes the delete event), so a replay that read the key's
older row before the log cleaner removed the delete event learns of it only from the tombstone
(Kafka docs, "Log Compaction": a consumer sees every delete marker if it reaches the head within
``delete.retention.ms``). A tombstone right after its delete event in the same
micro-batch (the normal case) takes that event's LSN, so a re-sent tombstone is guarded like its
delete; without one (the delete event was compacted away, or is in the previous
micro-batch) it ranks above the key's earlier records in the batch and deletes the row whatever its
LSN. The second case can briefly delete a row that a re-sent suffix (Debezium after a
crash: delete, tombstone, then the newer insert again) re-inserts in its next micro-batch. The table
records Delta's change data feed (``delta.enableChangeDataFeed``), which materialized views read.

``mode: history`` — output: the declared columns, ``valid_from``, ``valid_to`` (null while current),
``is_current``, ``_lsn`` (the change that made the version) and ``_end_lsn`` (the change that ended
it). A row read by the connector's initial snapshot is valid from :data:`BEGINNING_OF_TIME`; later
versions from the source commit time ``ts_ms``; a delete closes the current version. Changes at or
below the highest LSN already applied to a key are ignored, and each micro-batch is one ``MERGE``
(close the current version, insert the new ones), so a re-delivered change never makes a duplicate
version. A micro-batch reads and rewrites only its own keys' rows (:func:`batch_keys`,
:func:`history_merge_source`): its cost follows the batch, not the history's length.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, FieldSpec, TransformModel
from kappa.spec.base import KEYS, NAME, schema_shorthand
from kappa.streaming.kinds.base import Kind
from kappa.streaming.records import CORRUPT, KAFKA_COLUMNS, SPARK_TYPES, type_errors
from kappa.streaming.writers import Commit, MicroBatchWriter, ensure_table, record_columns

class ChangelogTransform(TransformModel):
    """Silver from a changelog topic of Debezium change events (``op`` r/c/u/d, ``after``,
    ``source.lsn``, ``source.ts_ms``), keyed by the source table's primary key.

    ``mode: current`` keeps the table's current state (MERGE in LSN order; deletes remove the row);
    ``mode: history`` keeps every version of each row as a slowly changing dimension type 2
    (``valid_from``, ``valid_to``, ``is_current``). ``schema`` declares the row's columns as the
    source table has them (a ``date`` arrives as days since the epoch, Debezium's
    ``io.debezium.time.Date``). The writer: :class:`ChangelogWriter`."""

    kind = "changelog"
    reads_kafka = True

    mode: Literal["current", "history"] = "current"
    key: Annotated[list[str], NAME] = Field(min_length=1)
    schema_: Annotated[dict[str, FieldSpec], KEYS] = Field(alias="schema", min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    _shorthand = field_validator("schema_", mode="before")(staticmethod(schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        """The declared row columns, column name -> :class:`FieldSpec`, in declaration order (a copy
        of ``schema``; the key columns are among them)."""
        return dict(self.schema_)

    @model_validator(mode="after")
    def _key_declared(self) -> "ChangelogTransform":
        for k in self.key:
            if k not in self.schema_:
                raise ValueError(f"key column {k!r} is not in schema")
        return self

    def sink_mode(self, spec: AssetSpec) -> Literal["append", "merge"]:
        """``merge``: rows replaced by key."""
        return "merge"

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """The source table's primary key."""
        return list(self.key)

    def row_columns(self) -> dict[str, FieldSpec]:
        """The declared row columns (the table adds ``_lsn`` and its mode's own)."""
        return self.fields

    def table_state(self) -> Literal["current", "history"]:
        """``mode``."""
        return self.mode

    def record_key(self) -> list[str]:
        """``key``: Debezium's record key is a JSON object of the primary key's columns."""
        return list(self.key)


#: The start of every version read by the initial snapshot: 1900-01-01T00:00:00Z, before any event
#: Kappa handles and inside pandas' nanosecond range (so delta-rs/pandas readers can load it).
BEGINNING_OF_TIME_EPOCH_S = -2208988800
OPS = ("r", "c", "u", "d")
#: Table property of a current-state table: Delta records its row-level changes (Delta docs,
#: "Change data feed"), which a materialized view over the table reads as a stream.
CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}


def _wire_type(type_name: str) -> T.DataType:
    """How Debezium's JSON carries a declared type: a ``date`` as days since the epoch."""
    return T.IntegerType() if type_name == "date" else SPARK_TYPES[type_name]


def _typed(col: Column, type_name: str) -> Column:
    if type_name == "date":
        return F.date_add(F.lit("1970-01-01").cast("date"), col)
    return col


def row_schema(transform: ChangelogTransform) -> list[T.StructField]:
    """The declared columns as Spark fields, in declaration order, all nullable, with their table
    types (a ``date`` is a ``DateType`` here; on the wire it is days since the epoch). The output
    table's schema is these plus the mode's bookkeeping columns (:func:`table_schema`)."""
    return [T.StructField(n, SPARK_TYPES[f.type], True) for n, f in transform.fields.items()]


def table_schema(transform: ChangelogTransform) -> T.StructType:
    """Schema of the output table (see the module docstring)."""
    meta = ([T.StructField("_lsn", T.LongType(), True), T.StructField("_changed_at", T.TimestampType(), True)]
            if transform.mode == "current" else
            [T.StructField("valid_from", T.TimestampType(), True), T.StructField("valid_to", T.TimestampType(), True),
             T.StructField("is_current", T.BooleanType(), True), T.StructField("_lsn", T.LongType(), True),
             T.StructField("_end_lsn", T.LongType(), True)])
    return T.StructType(row_schema(transform) + meta)


def parse_changes(kafka_df: DataFrame, transform: ChangelogTransform, asset: str) -> DataFrame:
    """Kafka records (tombstones excluded) -> the Kafka columns plus ``reason`` (null = good),
    ``_op``, ``_lsn``, ``_changed_at`` and every declared column (typed)."""
    fields = transform.fields
    text = F.col("value").cast("string")
    envelope = F.from_json(text, T.StructType([
        T.StructField("op", T.StringType()),
        T.StructField("source", T.StructType([T.StructField("lsn", T.LongType()), T.StructField("ts_ms", T.LongType())])),
        T.StructField(CORRUPT, T.StringType()),
    ]), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    after_text = F.get_json_object(text, "$.after")
    wire = {n: (f.type, _wire_type(f.type)) for n, f in fields.items()}
    after = F.from_json(after_text, T.StructType([T.StructField(n, t) for n, (_, t) in wire.items()]))
    key = F.from_json(F.col("key").cast("string"),
                      T.StructType([T.StructField(k, wire[k][1]) for k in transform.key]))
    declared = F.array(*[F.lit(n) for n in fields])
    extra = F.map_keys(F.map_filter(F.from_json(after_text, T.MapType(T.StringType(), T.StringType())),
                                    lambda k, v: v.isNotNull() & ~F.array_contains(declared, k)))
    required = [n for n, f in fields.items() if f.required and n not in transform.key]
    missing_after = F.concat_ws(", ", *[F.when(F.col("_after")[n].isNull(), F.lit(n)) for n in required]) \
        if required else F.lit("")
    missing_key = F.concat_ws(", ", *[F.when(F.col("_key")[k].isNull(), F.lit(k)) for k in transform.key])
    op = F.col("_env.op")
    has_row = op != F.lit("d")
    df = kafka_df.withColumn("_env", envelope).withColumn("_after", after).withColumn("_key", key) \
        .withColumn("_types", F.when(has_row, type_errors(after_text, wire))).withColumn("_extra", F.when(has_row, extra))
    reason = (
        F.when(~F.expr("is_valid_utf8(CAST(value AS STRING))"), F.lit("value is not valid UTF-8"))
        .when(F.col("_env").isNull() | F.col(f"_env.{CORRUPT}").isNotNull() | op.isNull(),
              F.lit("not a Debezium change event (a JSON object with op, source.lsn and after)"))
        .when(~op.isin(*OPS), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(F.col("_env.source.lsn").isNull(), F.lit("change event without source.lsn"))
        .when(F.col("key").isNull() | F.col("_key").isNull() | (missing_key != ""),
              F.concat(F.lit("record key lacks the primary key field(s): "), F.coalesce(missing_key, F.lit("?"))))
        .when(has_row & after_text.isNull(), F.concat(F.lit("op '"), op, F.lit("' without an 'after' row image")))
        .when(has_row & (F.col("_types") != ""), F.col("_types"))
        .when(has_row & (missing_after != ""), F.concat(F.lit("missing required field(s): "), missing_after))
        .when(has_row & (F.size(F.col("_extra")) > 0),
              F.concat(F.lit(f"column(s) not declared in the schema of {asset}: "), F.array_join(F.col("_extra"), ", "),
                       F.lit(" (added in the source? declare them and replay)")))
    )
    cols = [F.col(f"_key.{n}") if n in transform.key else F.col(f"_after.{n}") for n in fields]
    return df.select(
        "key", "value", "topic", "partition", "offset", "timestamp", reason.alias("reason"),
        op.alias("_op"), F.col("_env.source.lsn").alias("_lsn"),
        F.timestamp_millis(F.col("_env.source.ts_ms")).alias("_changed_at"),
        *[_typed(c, fields[n].type).alias(n) for c, n in zip(cols, fields)],
    )


def tombstones(kafka_df: DataFrame, transform: ChangelogTransform) -> DataFrame:
    """The tombstones among Kafka records (null value) as deletes, in the columns of
    :func:`parse_changes`: ``reason`` null, ``_op`` ``d``, ``_lsn`` and ``_changed_at`` null, the key
    columns from the record key, the other declared columns null. A tombstone whose key lacks the
    primary key is dropped: it names no row and carries no data."""
    fields = transform.fields
    key = F.from_json(F.col("key").cast("string"),
                      T.StructType([T.StructField(k, _wire_type(fields[k].type)) for k in transform.key]))
    df = kafka_df.where(F.col("value").isNull()).withColumn("_key", key)
    for k in transform.key:
        df = df.where(F.col(f"_key.{k}").isNotNull())
    return df.select(
        "key", "value", "topic", "partition", "offset", "timestamp", F.lit(None).cast("string").alias("reason"),
        F.lit("d").alias("_op"), F.lit(None).cast("long").alias("_lsn"), F.lit(None).cast("timestamp").alias("_changed_at"),
        *[(_typed(F.col(f"_key.{n}"), fields[n].type) if n in transform.key else F.lit(None).cast(SPARK_TYPES[fields[n].type])).alias(n)
          for n in fields],
    )


class ChangelogWriter(MicroBatchWriter):
    """foreachBatch body of a ``changelog`` asset (see the module docstring): bad change events to
    the quarantine table, good ones MERGEd in LSN order, each once per (writer id, batch id) (the
    append's and the MERGE's ``txn`` actions, the MERGE's through Delta's
    ``spark.databricks.delta.write.txnAppId``/``txnVersion`` session settings:
    :meth:`~kappa.streaming.writers.MicroBatchWriter.dml_commit`). A change applied by another batch
    changes nothing either: the MERGE applies only changes newer than the table's LSN per key. Fault
    points (the base's): ``before_write``, ``after_quarantine_commit``, ``after_table_commit``,
    ``after_batch``."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        self.transform = ChangelogTransform.of(spec)
        self.side_table(spark, "quarantine")
        # A current-state table records its change data feed: a materialized view over it follows
        # its inserts, updates and deletes (kappa.streaming.kinds.materialized_view).
        ensure_table(spark, version.table_path, table_schema(self.transform),
                     CHANGE_DATA_FEED if self.transform.mode == "current" else None)

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        raw = batch.select(*KAFKA_COLUMNS)
        changes = parse_changes(raw.where(F.col("value").isNotNull()), self.transform, self.spec.name)
        if self.transform.mode == "current":  # tombstones are deletes here (reason null: "good")
            changes = changes.unionByName(tombstones(raw, self.transform))
        changes = self.hold(changes)  # one read of the micro-batch for the quarantine and the MERGE
        # Both sides counted in one Spark job (it also fills the persisted frame).
        bad_rows, good_rows = changes.agg(F.count_if(F.col("reason").isNotNull()),
                                          F.count_if(F.col("reason").isNull())).first()
        commits = []
        if bad_rows:
            commits.append(self.side_commit(changes.where(F.col("reason").isNotNull()).select(
                *self.owner_columns(), *record_columns(), "reason", F.current_timestamp().alias("quarantined_at")),
                "quarantine", batch_id))
        if good_rows:
            good = changes.where(F.col("reason").isNull())
            merge = self._merge_current if self.transform.mode == "current" else self._merge_history
            commits.append(self.dml_commit(lambda: merge(good), batch_id, good.sparkSession))
        return commits

    def _merge_current(self, good: DataFrame) -> None:
        from delta.tables import DeltaTable

        keys, fields = self.transform.key, list(self.transform.fields)
        # Tombstones (null value and _lsn, see tombstones): one right after its delete event takes
        # that event's LSN, for the guard and the ranking (so it is guarded like the delete, and a
        # later change of the key still wins); one without (compacted away) ranks above the key's
        # earlier records in this batch and deletes whatever the row's LSN (guard LSN null).
        by_offset = Window.partitionBy(*keys).orderBy("offset")
        earlier = by_offset.rowsBetween(Window.unboundedPreceding, -1)
        tomb = F.col("value").isNull()
        after_delete = (F.lag("_op").over(by_offset) == "d") & F.lag("value").over(by_offset).isNotNull()
        delete_lsn = F.when(after_delete, F.lag("_lsn").over(by_offset))
        good = (good.withColumn("_rank", F.when(tomb, F.coalesce(delete_lsn, F.max("_lsn").over(earlier)))
                                .otherwise(F.col("_lsn")))
                .withColumn("_lsn", F.when(tomb, delete_lsn).otherwise(F.col("_lsn"))))
        latest = Window.partitionBy(*keys).orderBy(F.col("_rank").desc_nulls_last(), F.col("offset").desc())
        src = good.withColumn("_n", F.row_number().over(latest)).where("_n = 1").select(
            *fields, "_op", "_lsn", "_changed_at")
        out = [*fields, "_lsn", "_changed_at"]
        values = {c: F.col(f"s.`{c}`") for c in out}
        (DeltaTable.forPath(src.sparkSession, self.version.table_path).alias("t")
         .merge(src.alias("s"), " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys))
         .whenMatchedDelete(condition="s._op = 'd' AND (s._lsn IS NULL OR s._lsn >= t._lsn)")
         .whenMatchedUpdate(condition="s._op <> 'd' AND s._lsn > t._lsn", set=values)
         .whenNotMatchedInsert(condition="s._op <> 'd'", values=values)
         .execute())

    def _merge_history(self, good: DataFrame) -> None:
        merge_history(self.version.table_path, good, self.transform.key, list(self.transform.fields))


def merge_history(path: str, good: DataFrame, keys: list[str], fields: list[str]) -> None:
    """One history micro-batch: ``good`` (the batch's good change events, columns of
    :func:`parse_changes`) MERGEd into the history table at ``path`` (key columns ``keys``, declared
    columns ``fields``): per key, the version current in the table is closed by the first new
    change, and each new change but a delete inserts a version (:func:`history_merge_source`)."""
    from delta.tables import DeltaTable

    spark = good.sparkSession
    # Only the batch's keys are read, and only their files rewritten: the same predicate of
    # literals on the table's read and on the MERGE's target lets Delta skip every file whose
    # min/max statistics rule the keys out (Delta docs, "Data skipping"), so a batch's cost
    # follows the batch, not the history.
    only = batch_keys(good, keys)
    table = spark.read.format("delta").load(path)
    src = history_merge_source(good, table if only is None else table.where(only("")), keys, fields)
    on = F.expr(" AND ".join(f"t.`{k}` = s.`{k}`" for k in keys) +
                " AND ((s._action = 'close' AND t.is_current) OR (s._action = 'insert' AND t._lsn = s._lsn))")
    out = [*fields, "valid_from", "valid_to", "is_current", "_lsn", "_end_lsn"]
    (DeltaTable.forPath(spark, path).alias("t")
     .merge(src.alias("s"), on if only is None else on & only("t."))
     .whenMatchedUpdate(condition="s._action = 'close'",
                        set={"valid_to": F.col("s.valid_from"), "is_current": F.lit(False), "_end_lsn": F.col("s._lsn")})
     .whenNotMatchedInsert(condition="s._action = 'insert'", values={c: F.col(f"s.`{c}`") for c in out})
     .execute())


#: At most this many distinct keys in a micro-batch are named as literals in the history MERGE's
#: predicates (:func:`batch_keys`); a larger batch (a replay, a snapshot) reads the whole table, whose
#: size it then approaches anyway, instead of planning a predicate of thousands of literals.
MAX_KEY_LITERALS = 1_000


def batch_keys(changes: DataFrame, keys: list[str]):
    """The key values of ``changes`` (one small Spark job) as a predicate builder: ``prefix`` ->
    ``Column``, true for a row whose every key column is among the values that column takes in
    ``changes`` (``prefix``: a table alias with its dot, ``"t."``, or ``""``). A superset of the
    batch's keys for a composite key, exact for a single column. None when ``changes`` has more
    than :data:`MAX_KEY_LITERALS` distinct keys (or none)."""
    rows = changes.select(*keys).distinct().limit(MAX_KEY_LITERALS + 1).collect()
    if not rows or len(rows) > MAX_KEY_LITERALS:
        return None
    values = {k: sorted({r[k] for r in rows if r[k] is not None}) for k in keys}

    def predicate(prefix: str) -> Column:
        cols = [F.col(f"{prefix}`{k}`").isin(values[k]) for k in keys]
        out = cols[0]
        for c in cols[1:]:
            out = out & c
        return out

    return predicate


def history_merge_source(good: DataFrame, table: DataFrame, keys: list[str], fields: list[str]) -> DataFrame:
    """The source of a history micro-batch's MERGE (see the module docstring, ``mode: history``).

    In: ``good``, the batch's good change events (columns of :func:`parse_changes`: ``offset``,
    ``_op``, ``_lsn``, ``_changed_at`` and ``fields``); ``table``, the history table's rows, or any
    subset of them holding every row of the keys in ``good`` (the rows of other keys do not change
    the result). Out: ``fields``, ``valid_from``, ``valid_to``, ``is_current``, ``_lsn``,
    ``_end_lsn`` and ``_action``: ``insert`` (a new version, one per change above the highest LSN
    already applied to its key, deletes excepted) or ``close`` (per key, the first such change, which
    ends the version current in the table: the other columns null). A change at or below the key's
    highest applied LSN (``_lsn`` or ``_end_lsn`` of its rows) is left out, as is a second copy of
    one (key, LSN)."""
    applied = table.groupBy(*keys).agg(
        F.max(F.greatest(F.col("_lsn"), F.coalesce(F.col("_end_lsn"), F.lit(-1)))).alias("_applied"))
    once = Window.partitionBy(*keys, "_lsn").orderBy("offset")
    new = (good.withColumn("_n", F.row_number().over(once)).where("_n = 1").drop("_n")
           .join(applied, list(keys), "left")
           .where(F.col("_applied").isNull() | (F.col("_lsn") > F.col("_applied")))
           .withColumn("valid_from", F.when(F.col("_op") == "r", F.timestamp_seconds(F.lit(BEGINNING_OF_TIME_EPOCH_S)))
                       .otherwise(F.col("_changed_at"))))
    order = Window.partitionBy(*keys).orderBy("_lsn")
    new = (new.withColumn("valid_to", F.lead("valid_from").over(order))
           .withColumn("_end_lsn", F.lead("_lsn").over(order))
           .withColumn("_first", F.row_number().over(order) == 1))
    versions = new.where(F.col("_op") != "d").select(
        *fields, "valid_from", "valid_to", F.col("_end_lsn").isNull().alias("is_current"), "_lsn", "_end_lsn",
        F.lit("insert").alias("_action"))
    # The first new change of a key ends the version that is current in the table (if any).
    types = {f.name: f.dataType for f in table.schema.fields}
    closes = new.where("_first").select(
        *[F.col(k) for k in keys], *[F.lit(None).cast(types[c]).alias(c) for c in fields if c not in keys],
        "valid_from", F.lit(None).cast("timestamp").alias("valid_to"), F.lit(False).alias("is_current"),
        "_lsn", F.lit(None).cast("long").alias("_end_lsn"), F.lit("close").alias("_action"))
    return versions.unionByName(closes)


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``changelog`` query: change events into :class:`ChangelogWriter`."""
    return source.writeStream.foreachBatch(ChangelogWriter(spark, spec, version, settings))


def _history(spec: AssetSpec) -> bool:
    # A history keeps every version of every row; a compacted topic keeps only the latest per key.
    return ChangelogTransform.of(spec).mode == "history"


KIND = Kind(model=ChangelogTransform, start=start, quarantines=True, forget="key_columns", full_log=_history)
