"""Parsing Kafka record values into typed rows, and naming why a record is bad.

Input: the Kafka source's columns (``key`` binary, ``value`` binary, ``topic`` string, ``partition``
int, ``offset`` long, ``timestamp`` timestamp). Output of :func:`parse_columns`: the same columns plus
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

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kappa.spec import FieldSpec, ParseTransform, interval_seconds

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


_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def _alone(text: Column, name: str, spark_type: T.DataType) -> Column:
    """Field ``name`` of the JSON object ``text`` parsed on its own (null when absent or not of ``spark_type``)."""
    return F.from_json(text, T.StructType([T.StructField(name, spark_type)]), _PERMISSIVE)[name]


def _wrong_type(text: Column, name: str, spark_type: T.DataType) -> Column:
    """True when field ``name`` of ``text`` is present and not null but does not convert to ``spark_type``."""
    return F.get_json_object(text, json_path(name)).isNotNull() & _alone(text, name, spark_type).isNull()


def type_errors(text: Column, types: dict[str, tuple[str, T.DataType]]) -> Column:
    """``field 'x' is not a valid int: "abc"; …`` for every field of the JSON object ``text`` whose
    value does not convert to its declared type (name -> (declared type name, Spark type)); an empty
    string when every present field converts."""
    wrong_type = []
    for name, (type_name, spark_type) in types.items():
        # Spark nulls every field after the first bad one, so test each field on its own.
        raw = F.get_json_object(text, json_path(name))
        wrong_type.append(
            F.when(_wrong_type(text, name, spark_type),
                   F.concat(F.lit(f"field '{name}' is not a valid {type_name}: "), F.substring(raw, 1, 80)))
        )
    return F.concat_ws("; ", *wrong_type)


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
        any_wrong = any_wrong | _wrong_type(text, name, SPARK_TYPES[f.type])
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


#: The column of :func:`parse_columns` holding a record's undeclared fields (see :func:`rescued_column`).
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


def parse_columns(kafka_df: DataFrame, transform: ParseTransform) -> DataFrame:
    """Add ``r`` (parsed struct), ``reason`` (null = good) and ``_rescued`` (:func:`rescued_column`)
    to a frame of Kafka records. A record the whole-object parse cannot type (its corrupt-record
    field set) is parsed again field by field, so an optional field of the wrong type is null in
    ``r`` and its value rescued while the other fields keep theirs."""
    fields = transform.fields
    schema = row_schema(fields).add(T.StructField(CORRUPT, T.StringType(), True))
    text = F.col("value").cast("string")
    whole = F.col("_whole")  # one whole-object parse per record, read below by name
    by_field = F.struct(*[_alone(text, name, SPARK_TYPES[f.type]).alias(name) for name, f in fields.items()],
                        whole[CORRUPT].alias(CORRUPT))
    optional = [name for name, f in fields.items() if not f.required]
    mistyped = F.when(whole[CORRUPT].isNotNull(), F.filter(
        F.array(*[F.when(_wrong_type(text, name, SPARK_TYPES[fields[name].type]), F.lit(name)) for name in optional]),
        lambda n: n.isNotNull())) if optional else None
    return (kafka_df.withColumn("_whole", F.from_json(text, schema, _PERMISSIVE))
            .withColumn("r", F.when(whole.isNull() | whole[CORRUPT].isNull(), whole).otherwise(by_field))
            .withColumn("reason", reason_column(text, F.col("value"), F.col("r"), transform))
            .withColumn(RESCUED, rescued_column(text, list(fields), mistyped))
            .drop("_whole"))


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
