"""Kafka records and the tables that keep them: the columns a query keeps of a record
(:data:`KAFKA_COLUMNS`), the declared types in Spark's terms (:data:`SPARK_TYPES`), JSON field
helpers shared by the kinds that parse record values (``parse``, ``changelog``), and the schemas of
the shared quarantine, late-events and rescued-fields tables.

Parsing (:func:`kappa.streaming.kinds.parse.parse_columns`): input, the Kafka source's columns
(``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long,
``timestamp`` timestamp); output, the same columns plus
``r`` (the parsed struct, every declared field nullable), ``reason`` (string, null for a good
record) and ``_rescued`` (schema drift, as JSON: the fields the record has and the asset does not
declare, and the values of declared optional fields that are not of their declared type; null for
none; kept in the rescued-fields table, never dropped without a word).

A record is bad, in this order of reasons, when its value is null or empty, is larger than
``max_value_bytes``, is not valid UTF-8, is not a JSON object (malformed, or nested deeper than the
JSON reader allows), has a *required* field of the wrong type, lacks a required field, or has an
event time more than ``max_future`` ahead of the processing time. An optional field of the wrong
type does not make a record bad (as Auto Loader's rescued data column): the row keeps null there
and the value is rescued, so ``kappa declarations evolve`` can propose the type that holds it. Spark's
JSON reader in PERMISSIVE mode puts the raw text of a record it cannot type in the corrupt-record
column (Spark SQL guide, "JSON Files": ``columnNameOfCorruptRecord``) and nulls the fields after the
first bad one; such a record alone is parsed again field by field.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kappa.spec import FieldSpec

#: The corrupt-record column of Spark's JSON reader (:data:`PERMISSIVE`).
CORRUPT = "_corrupt_record"

#: The columns of a Kafka record the queries keep (Spark's Kafka source schema, less
#: ``timestampType`` and ``headers``).
KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]

SPARK_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
}


def row_schema(fields: dict[str, FieldSpec]) -> T.StructType:
    """The typed schema of the parsed rows (all fields nullable: ``required`` is checked apart)."""
    return T.StructType([T.StructField(name, SPARK_TYPES[f.type], True) for name, f in fields.items()])


def json_path(name: str) -> str:
    """The JSONPath of top-level field ``name`` (``$.name``, or ``$['name']`` when not an identifier)."""
    return "$." + name if name.isidentifier() else f"$['{name}']"


#: Options of Spark's JSON reader that keep a record it cannot type (its text in :data:`CORRUPT`).
PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def field_alone(text: Column, name: str, spark_type: T.DataType) -> Column:
    """Field ``name`` of the JSON object ``text`` parsed on its own (null when absent or not of ``spark_type``)."""
    return F.from_json(text, T.StructType([T.StructField(name, spark_type)]), PERMISSIVE)[name]


def wrong_type(text: Column, name: str, spark_type: T.DataType) -> Column:
    """True when field ``name`` of ``text`` is present and not null but does not convert to ``spark_type``."""
    return F.get_json_object(text, json_path(name)).isNotNull() & field_alone(text, name, spark_type).isNull()


def type_errors(text: Column, types: dict[str, tuple[str, T.DataType]]) -> Column:
    """``field 'x' is not a valid int: "abc"; …`` for every field of the JSON object ``text`` whose
    value does not convert to its declared type (name -> (declared type name, Spark type)); an empty
    string when every present field converts."""
    errors = []
    for name, (type_name, spark_type) in types.items():
        # Spark nulls every field after the first bad one, so test each field on its own.
        raw = F.get_json_object(text, json_path(name))
        errors.append(
            F.when(wrong_type(text, name, spark_type),
                   F.concat(F.lit(f"field '{name}' is not a valid {type_name}: "), F.substring(raw, 1, 80)))
        )
    return F.concat_ws("; ", *errors)


#: The column of :func:`kappa.streaming.kinds.parse.parse_columns` holding a record's undeclared fields (see :func:`rescued_column`).
RESCUED = "_rescued"


def rescued_column(text: Column, declared: list[str], mistyped: Column | None = None) -> Column:
    """The fields of the JSON object ``text`` that ``declared`` does not name, and those named in
    ``mistyped`` (an array of declared fields whose value is not of their type; null for none), as
    a JSON object of field -> value text (a nested value as its JSON), null when there is none (or
    ``text`` is not a JSON object): what schema drift adds or changes, kept instead of dropped. One
    parse of the object's keys per record; the map only for a record that has such a field."""
    names = F.array(*[F.lit(n) for n in declared])
    extra = F.array_except(F.json_object_keys(text), names)
    retyped = F.coalesce(mistyped, F.array().cast("array<string>")) if mistyped is not None else None
    undeclared = F.map_filter(
        F.from_json(text, T.MapType(T.StringType(), T.StringType())),
        (lambda k, _v: ~F.array_contains(names, k)) if retyped is None
        else (lambda k, _v: ~F.array_contains(names, k) | F.array_contains(retyped, k)))
    drifted = F.size(extra) > 0 if retyped is None else (F.size(extra) > 0) | (F.size(retyped) > 0)
    return F.when(drifted, F.to_json(undeclared))


def _coordinate_fields() -> list[T.StructField]:
    """Where a Kafka record is in the log: ``topic``, ``partition``, ``offset``."""
    return [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("offset", T.LongType(), True),
    ]


def kafka_schema() -> T.StructType:
    """Schema of :data:`KAFKA_COLUMNS` as Spark's Kafka source gives them (``key``/``value``
    binary, the coordinates, ``timestamp``): for records read back from the log outside a query."""
    return T.StructType([T.StructField("key", T.BinaryType(), True), T.StructField("value", T.BinaryType(), True),
                         *_coordinate_fields(), T.StructField("timestamp", T.TimestampType(), True)])


def _record_fields() -> list[T.StructField]:
    """Where a Kafka record came from and its raw bytes: kept for every record Kappa sets aside."""
    return [
        *_coordinate_fields(),
        T.StructField("kafka_timestamp", T.TimestampType(), True),
        T.StructField("key", T.BinaryType(), True),
        T.StructField("value", T.BinaryType(), True),
    ]


def _owner_fields() -> list[T.StructField]:
    return [T.StructField("asset", T.StringType(), False), T.StructField("version", T.IntegerType(), False)]


def late_events_schema() -> T.StructType:
    """Schema of the late-events table: valid events that arrived behind the asset's watermark.
    ``reason`` (last, nullable) says which rule set a row aside where more than one could: a
    stateful operator's dropped rows (:mod:`kappa.streaming.late`) carry it, silver's and a
    pattern's leave it null (theirs is always "behind the watermark")."""
    return T.StructType([
        *_owner_fields(),
        T.StructField("event_id", T.StringType(), True),
        T.StructField("event_time", T.TimestampType(), True),
        T.StructField("watermark", T.TimestampType(), True),
        *_record_fields(),
        T.StructField("arrived_at", T.TimestampType(), False),
        T.StructField("reason", T.StringType(), True),
    ])


def rescued_schema() -> T.StructType:
    """Schema of the rescued-fields table (schema drift): per good record that carried fields its
    asset does not declare, the record's event id and Kafka coordinates and ``fields``, a JSON
    object of those fields (:func:`rescued_column`); ``batch_id`` the micro-batch that read it."""
    return T.StructType([
        *_owner_fields(),
        T.StructField("event_id", T.StringType(), True),
        *_coordinate_fields(),
        T.StructField("fields", T.StringType(), False),
        T.StructField("batch_id", T.LongType(), False),
        T.StructField("rescued_at", T.TimestampType(), False),
    ])


def quarantine_schema() -> T.StructType:
    """Schema of the quarantine table: where a bad record came from, its raw bytes, and why."""
    return T.StructType([
        *_owner_fields(),
        *_record_fields(),
        T.StructField("reason", T.StringType(), False),
        T.StructField("quarantined_at", T.TimestampType(), False),
    ])


def earliest_copies(rows: DataFrame, event_id: str) -> DataFrame:
    """One row per ``r.<event_id>`` of ``rows`` (parsed records with their ``topic``, ``partition``
    and ``offset``): the earliest copy in the log wins, so every version (and a replay of the whole
    log in one batch, and the bench's U3) keeps the same copy: silver's rule (``parse``). Same
    columns as ``rows``."""
    first = Window.partitionBy(F.col(f"r.{event_id}")).orderBy("topic", "partition", "offset")
    return rows.withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n")
