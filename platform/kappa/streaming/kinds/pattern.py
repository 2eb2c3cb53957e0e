"""``pattern`` (gold, complex event processing): a declarative pattern (:class:`PatternTransform`)
matched per key in event-time order by the CEP matcher (:mod:`kappa.streaming.cep`) run per key by a
stateful processor (Spark 4.1's ``transformWithState``, RocksDB state store, event-time timers).

Why events are buffered: a micro-batch delivers a key's events in arrival order, not event-time
order, and a later batch may still bring an earlier event. A match over consecutive events is only
right when the events are fed in event-time order, so the processor keeps each key's new events in a
``pending`` list in the state store and registers an event-time timer at the earliest pending time.
Spark fires a timer once the watermark (max event time seen - the asset's delay) reaches it; the
processor then releases every pending event at or before the watermark, in order (event time, then
``order_by``, then ``event_id``), to the matcher, emits the matches they complete and keeps the
matcher's partial match in the state store.

Late rows are named, not dropped. Spark's stateful operators drop an input row whose watermark
column is at or before the watermark (``event_time <= watermark``) and only count it
(``numRowsDroppedByWatermark``). The processor's input therefore carries the event time only as
``_t`` (microseconds), not the watermark column itself, so Spark hands it every row (the watermark
still drives the timers) and the processor decides, per key: a row at or before the point its key
was already released to cannot be put in order any more and is written to the late-events table
(``event_id``, event time, that release point as ``watermark``), where the gate's ``late_rows``
check counts it; a row behind the watermark but after its key's release point is still matched in
its true order (nothing after it has been fed), exactly as a replay would match it.

Consequences: a match is emitted once the watermark passes its last event, so the newest ``delay``
of the log waits for later events (on a finished log, matches whose last event is within ``delay``
of the latest event time stay pending); the state of a key is its pending events plus a partial
match, bounded by the events of ``delay`` and ``within``; a key's state is cleared when both are empty.

Spark rules relied on (Structured Streaming guide, "Arbitrary State API v2" / transformWithState):
``timeMode="EventTime"`` needs a watermark on the input; timers fire in the micro-batch whose
watermark passes them, after that batch's input rows were handled; state and timers are in the
checkpoint, so a restarted query continues partial matches where it stopped; output mode ``Append``.

Output schema of :func:`pattern_frame`: ``<key>``, ``first_event_time``, ``last_event_time``
(timestamp), ``event_ids`` (array<string>), then one array per ``collect`` entry, plus the internal
``_late`` / ``_watermark`` columns that :class:`PatternWriter` uses to route late rows.
"""

from __future__ import annotations

from typing import Annotated, Iterator, Literal

from pydantic import Field, field_validator, model_validator
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel, interval_seconds
from kappa.spec.base import EXPRESSION, NAME, PLAIN, StrictModel, check_interval, check_name
from kappa.streaming.cep import Event, Matcher, Pattern, release
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import Commit, MicroBatchWriter

class PatternStep(StrictModel):
    """One step of a pattern: ``count`` consecutive events (in the pattern's contiguity) that each
    satisfy the SQL predicate ``when`` over the input's columns."""

    name: Annotated[str, NAME]
    when: Annotated[str, EXPRESSION] = Field(min_length=1)
    count: int = Field(1, ge=1, le=100)

    _n = field_validator("name")(check_name)


#: Columns every pattern's output has, besides its ``collect`` arrays.
PATTERN_COLUMNS = ("first_event_time", "last_event_time", "event_ids")


class PatternTransform(TransformModel):
    """Complex event processing over one key's events (semantics in :mod:`kappa.streaming.cep`).

    Output, one row per match: ``<key>``, ``first_event_time``, ``last_event_time`` (timestamps),
    ``event_ids`` (array of the matched events' ids, in order), then one array per ``collect``
    entry (output column -> input column, e.g. ``dep_delays: dep_delay``)."""

    kind = "pattern"

    key: Annotated[str, NAME]
    time_column: Annotated[str, NAME] = "event_time"
    #: Tie-breakers after ``time_column`` (then ``event_id``), so the order is total.
    order_by: Annotated[list[str], NAME] = Field(default_factory=list)
    event_id: Annotated[str, NAME] = "event_id"
    #: SQL predicate: only these events are seen by the pattern (others neither match nor break it).
    where: Annotated[str | None, EXPRESSION] = None
    steps: list[PatternStep] = Field(min_length=1)
    contiguity: Literal["strict", "relaxed"] = "strict"
    within: Annotated[str, PLAIN]
    collect: Annotated[dict[str, str], NAME] = Field(default_factory=dict)

    _w = field_validator("within")(classmethod(lambda cls, v: check_interval(v)))

    @model_validator(mode="after")
    def _shape(self) -> "PatternTransform":
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique, got {names}")
        taken = {self.key, *PATTERN_COLUMNS}
        for out in self.collect:
            check_name(out)
            if out in taken:
                raise ValueError(f"collect: output column {out!r} collides with {sorted(taken)}")
        return self

    @property
    def input_columns(self) -> list[str]:
        """Every input column the pattern names (a step's SQL predicate aside)."""
        cols = [self.key, self.time_column, *self.order_by, self.event_id, *self.collect.values()]
        return list(dict.fromkeys(cols))

    def check(self, spec: AssetSpec) -> None:
        """A watermark on ``time_column``; appended, never merged."""
        # Events are matched in event-time order, which only the watermark can vouch for
        # (a stateful processor's event-time timers fire as the watermark passes).
        if spec.watermark is None:
            raise ValueError("a pattern transform needs a watermark (watermark.column, watermark.delay): "
                             "events are buffered until the watermark passes them, then matched in order")
        if spec.watermark.column != self.time_column:
            raise ValueError("watermark.column must equal transform.pattern.time_column")
        if spec.sink.mode == "merge":
            raise ValueError("sink.mode: a pattern's matches are final once emitted; use 'append'")

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """The key and the match's first event time."""
        return [self.key, "first_event_time"]

    def check_catalog(self, spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
        """Over an upstream whose columns are declared, the pattern names only those columns, a
        timestamp ``time_column``, and no timestamp or date among ``order_by`` and ``collect``."""
        up = assets[spec.source.asset] if spec.source.asset else None
        fields = up.transform.model.row_columns() if up is not None else None
        if up is None or fields is None:
            return
        named = {"key": [self.key], "time_column": [self.time_column], "order_by": self.order_by,
                 "event_id": [self.event_id], **{f"collect.{k}": [v] for k, v in self.collect.items()}}
        for where, cols in named.items():
            for c in cols:
                if c not in fields:
                    raise ValueError(f"transform.pattern.{where}: column {c!r} is not in {up.name}'s schema ({up.where})")
        # The state store keeps a pending event's tie-breakers and collected values as JSON.
        for where, cols in (("order_by", self.order_by), *((f"collect.{k}", [v]) for k, v in self.collect.items())):
            for c in cols:
                if fields[c].type in ("timestamp", "date"):
                    raise ValueError(f"transform.pattern.{where}: column {c!r} has type {fields[c].type}; "
                                     "use string, number or boolean columns")
        if fields[self.time_column].type != "timestamp":
            raise ValueError(f"transform.pattern.time_column: {self.time_column!r} must be a timestamp")


_STRING_LIST = T.StructType([T.StructField("event", T.StringType(), False)])
_LONG = T.StructType([T.StructField("value", T.LongType(), False)])
_NEVER = -(2**62)


def cep_pattern(spec: AssetSpec) -> Pattern:
    """The matcher's :class:`~kappa.streaming.cep.Pattern` for a ``pattern`` asset: one position per
    counted step, ``within`` converted to microseconds, the declared contiguity. ``spec`` must have a
    ``transform.pattern`` (an assertion, not a user error: the spec validated it)."""
    p = PatternTransform.of(spec)
    return Pattern.from_counts([s.count for s in p.steps], int(interval_seconds(p.within) * 1_000_000), p.contiguity)


class PatternProcessor(StatefulProcessor):
    """Per key: buffer events until the watermark passes them, then match them in order.

    Input rows: ``_t`` (event time, µs), ``_id``, ``_o<k>`` (tie-breakers), ``_s<i>`` (step i's
    predicate), ``_v<j>`` (collected values). Output rows: ``_kind`` ("match"/"late"), ``_first_us``,
    ``_last_us``, ``_ids`` (list), ``_v<j>`` (list per collected column), ``_watermark_us``."""

    def __init__(self, pattern: Pattern, n_order: int, n_steps: int, n_values: int):
        self.pattern, self.n_order, self.n_steps, self.n_values = pattern, n_order, n_steps, n_values

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", _STRING_LIST)
        self.partial = handle.getListState("partial", _STRING_LIST)
        self.timer = handle.getValueState("timer_ms", _LONG)
        self.released = handle.getValueState("released_us", _LONG)

    def _event(self, row: Row) -> Event:
        return Event(int(row["_t"]), tuple(row[f"_o{k}"] for k in range(self.n_order)), row["_id"],
                     tuple(bool(row[f"_s{i}"]) for i in range(self.n_steps)),
                     tuple(row[f"_v{j}"] for j in range(self.n_values)))

    @staticmethod
    def _row(key, kind: str, first_us: int, last_us: int, ids: list, values: list, watermark_us: int) -> Row:
        fields = {"_key": key[0], "_kind": kind, "_first_us": first_us, "_last_us": last_us, "_ids": ids,
                  **{f"_v{j}": v for j, v in enumerate(values)}, "_watermark_us": watermark_us}
        return Row(**fields)

    def _value(self, state) -> int | None:
        return state.get()[0] if state.exists() else None

    def _arm(self, earliest_us: int) -> None:
        """Keep one timer, at the earliest pending event (rounded up to the timer's milliseconds)."""
        at = -(-earliest_us // 1000)
        cur = self._value(self.timer)
        if cur is not None and cur <= at:
            return
        if cur is not None:
            self.handle.deleteTimer(cur)
        self.handle.registerTimer(at)
        self.timer.update((at,))

    def handleInputRows(self, key, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        released = self._value(self.released)
        released = _NEVER if released is None else released
        fresh, late = [], []
        for row in rows:
            e = self._event(row)
            (late if e.time_us <= released else fresh).append(e)
        for e in late:
            yield self._row(key, "late", e.time_us, e.time_us, [e.event_id], [None] * self.n_values, released)
        if fresh:
            self.pending.appendList([(e.to_json(),) for e in fresh])
            self._arm(min(e.time_us for e in fresh))

    def handleExpiredTimer(self, key, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        self.timer.clear()
        watermark_us = timerValues.getCurrentWatermarkInMs() * 1000
        pending = [Event.from_json(r[0]) for r in self.pending.get()] if self.pending.exists() else []
        ready, kept = release(pending, watermark_us)
        matcher = Matcher.restore(self.pattern, (r[0] for r in self.partial.get()) if self.partial.exists() else ())
        for e in ready:
            m = matcher.feed(e)
            if m is not None:
                yield self._row(key, "match", m.first_us, m.last_us, m.event_ids,
                                [m.collected(j) for j in range(self.n_values)], watermark_us)
        # Cleared state costs nothing in the state store: a key without pending events or a partial
        # match keeps only its release point (needed to recognise a late row).
        if kept:
            self.pending.put([(e.to_json(),) for e in kept])
            self._arm(min(e.time_us for e in kept))
        else:
            self.pending.clear()
        if matcher.buffer:
            self.partial.put([(s,) for s in matcher.state()])
        else:
            self.partial.clear()
        self.released.update((watermark_us,))

    def close(self) -> None:
        pass


def pattern_frame(df: DataFrame, spec: AssetSpec) -> DataFrame:
    """The matches of ``spec``'s pattern over the stream ``df`` (schema: the upstream's columns).

    Output: ``<key>``, ``first_event_time``, ``last_event_time``, ``event_ids``, one array column
    per ``collect`` entry (element type = the input column's), ``_late`` (boolean: a row that
    arrived after its key was released past it), ``_watermark`` (timestamp)."""
    p = PatternTransform.of(spec)
    assert spec.watermark is not None
    df = df.withWatermark(spec.watermark.column, spec.watermark.delay)
    if p.where:
        df = df.where(F.expr(p.where))
    collect = list(p.collect.items())
    types = {f.name: f.dataType for f in df.schema.fields}
    # Not the watermark column itself: with it in its input, Spark would drop late rows unseen
    # (the module docstring: late rows are named, not dropped).
    prepared = df.select(
        F.col(p.key).alias("_key"),
        F.unix_micros(F.col(p.time_column)).alias("_t"),
        F.col(p.event_id).cast("string").alias("_id"),
        # Tie-breakers keep their types: a flight number must sort as a number, not as text.
        *[F.col(c).alias(f"_o{k}") for k, c in enumerate(p.order_by)],
        *[F.coalesce(F.expr(s.when), F.lit(False)).alias(f"_s{i}") for i, s in enumerate(p.steps)],
        *[F.col(src).alias(f"_v{j}") for j, (_, src) in enumerate(collect)],
    )
    out_schema = T.StructType([
        T.StructField("_key", types[p.key]),
        T.StructField("_kind", T.StringType()),
        T.StructField("_first_us", T.LongType()),
        T.StructField("_last_us", T.LongType()),
        T.StructField("_ids", T.ArrayType(T.StringType())),
        *[T.StructField(f"_v{j}", T.ArrayType(types[src])) for j, (_, src) in enumerate(collect)],
        T.StructField("_watermark_us", T.LongType()),
    ])
    processor = PatternProcessor(cep_pattern(spec), len(p.order_by), len(p.steps), len(collect))
    matched = prepared.groupBy("_key").transformWithState(
        processor, out_schema, outputMode="Append", timeMode="EventTime")
    return matched.select(
        F.col("_key").alias(p.key),
        F.timestamp_micros("_first_us").alias("first_event_time"),
        F.timestamp_micros("_last_us").alias("last_event_time"),
        F.col("_ids").alias("event_ids"),
        *[F.col(f"_v{j}").alias(out) for j, (out, _) in enumerate(collect)],
        (F.col("_kind") == "late").alias("_late"),
        F.timestamp_micros("_watermark_us").alias("_watermark"),
    )


class PatternWriter(MicroBatchWriter):
    """foreachBatch body of a ``pattern`` asset: late rows to the late-events table, then matches
    to the asset's table; both appends idempotent per (writer id, batch id)
    (:class:`~kappa.streaming.writers.MicroBatchWriter`), so a batch re-run after a crash is skipped
    where it already committed. A re-run batch recomputes the same rows: Spark re-runs it over the
    same offsets from the state store version of the batch before (Structured Streaming guide,
    "Fault Tolerance Semantics").

    In: :func:`pattern_frame`'s rows. Fault points (the base's): ``before_write``,
    ``after_late_commit`` (a batch with late rows), ``after_table_commit`` and ``after_batch``."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version, settings):
        super().__init__(spec, version, settings)
        self.side_table(spark, "late")

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        # The processor runs once per batch (every partition computed and cached here): the late
        # rows and the matches are both read from the cache, and a re-run whose late rows committed
        # (Delta skips that append without reading the batch) still commits the processor's state.
        batch = self.hold(batch)
        batch.count()
        late = batch.where(F.col("_late"))
        commits = []
        if not late.isEmpty():
            commits.append(self.side_commit(late.select(
                *self.owner_columns(),
                F.col("event_ids")[0].alias("event_id"), F.col("first_event_time").alias("event_time"),
                F.col("_watermark").alias("watermark"),
                F.lit(None).cast("string").alias("topic"), F.lit(None).cast("int").alias("partition"),
                F.lit(None).cast("long").alias("offset"), F.lit(None).cast("timestamp").alias("kafka_timestamp"),
                F.lit(None).cast("binary").alias("key"), F.lit(None).cast("binary").alias("value"),
                F.current_timestamp().alias("arrived_at")), "late", batch_id))
        matches = batch.where(~F.col("_late")).drop("_late", "_watermark")
        return [*commits, self.append_commit(matches, batch_id)]


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``pattern`` query: the matches, in append mode, into :class:`PatternWriter`."""
    return pattern_frame(source, spec).writeStream.outputMode("append").foreachBatch(
        PatternWriter(spark, spec, version, settings))


KIND = Kind(model=PatternTransform, start=start, stateful=lambda spec: True, keeps_late_rows=True,
            gate_checks=("late_rows",))
