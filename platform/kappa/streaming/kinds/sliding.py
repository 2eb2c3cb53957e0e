"""``sliding`` (gold): the sliding window of DDIA ch. 11, one window per event: each row with the
number of rows of its group whose time is in ``[t - size, t]``.

A ``transformWithState`` operator (Spark 4.1, "Arbitrary State API v2") in ``Append`` mode with
event-time timers: rows wait in the group's state until the watermark passes their time, so every
row at the same time is counted; input rows at or behind the watermark are dropped by Spark and
counted in ``numRowsDroppedByWatermark``. State and timers live in the checkpoint (RocksDB state
store), so a restarted query carries on. Appended once per micro-batch in ``append`` mode
(:func:`kappa.streaming.writers.frame_sink`). In micro-batch N the operator drops the rows at or
behind the previous batch's watermark (``TransformWithStateExec``'s
``watermarkPredicateForDataForLateEvents``); :func:`late_sliding_rows` names them afterwards
(:mod:`kappa.streaming.late`).

This module is the whole kind: its model (:class:`SlidingTransform`), its frame, its processor and
its registry entry (:data:`KIND`).
"""

from __future__ import annotations

from typing import Annotated, Iterator

import numpy as np
from pydantic import Field, field_validator
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
from kappa.spec.base import EXPRESSION, NAME, PLAIN, check_interval
from kappa.streaming.kinds.base import Kind, LateFrame
from kappa.streaming.writers import frame_sink


class SlidingTransform(TransformModel):
    """A sliding window in DDIA's sense (ch. 11, "Types of windows"): one window per event. For
    every row, ``output`` = the number of rows with the same ``group_by`` values whose
    ``time_column`` is in ``[t - size, t]`` (the row itself and rows at the same time included).
    A row is emitted once the watermark has passed its time, so every row at that time is counted.
    Output: ``columns`` (default: ``event_id``, the group-by columns, ``time_column``) then
    ``output``."""

    kind = "sliding"
    row_expectations = True

    time_column: Annotated[str, NAME]
    size: Annotated[str, PLAIN]
    group_by: Annotated[list[str], NAME] = Field(default_factory=list)
    output: Annotated[str, NAME] = "count"
    columns: Annotated[list[str] | None, NAME] = None
    filter: Annotated[str | None, EXPRESSION] = None

    @field_validator("size")
    @classmethod
    def _intervals(cls, v: str) -> str:
        return check_interval(v)

    @property
    def out_columns(self) -> list[str]:
        """The output table's columns, in order: ``columns`` (default ``event_id``, the group-by
        columns, ``time_column``) then the count column ``output``."""
        cols = self.columns or ["event_id", *self.group_by, self.time_column]
        return [*cols, self.output]

    def check(self, spec: AssetSpec) -> None:
        """A watermark on ``time_column``: a row is emitted once the watermark has passed its time."""
        if spec.watermark is None or spec.watermark.column != self.time_column:
            raise ValueError(
                "a sliding window emits a row once the watermark has passed its time: set watermark "
                "with watermark.column equal to transform.sliding.time_column")

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """``event_id``: one output row per input row."""
        return ["event_id"]


def sliding_counts(pending_ms: np.ndarray, history_ms: np.ndarray, watermark_ms: int, size_ms: int):
    """One step of a group's sliding window. Pure function.

    Rows with time <= ``watermark_ms`` are final: Spark drops any later input row at or behind the
    watermark (``event_time <= watermark``), so each is emitted with the number of rows (emitted
    or pending) whose time is in ``[t - size_ms, t]``. Returns ``(emit_mask, counts,
    new_history_ms)``: the pending rows to emit, their counts, and the times to keep for later rows
    (those >= ``watermark_ms - size_ms``: a later row has a time > ``watermark_ms``)."""
    all_ms = np.sort(np.concatenate([history_ms, pending_ms]))
    emit = pending_ms <= watermark_ms
    t = pending_ms[emit]
    counts = np.searchsorted(all_ms, t, "right") - np.searchsorted(all_ms, t - size_ms, "left")
    keep = np.concatenate([history_ms, t])
    return emit, counts, np.sort(keep[keep >= watermark_ms - size_ms])


_PENDING = T.StructType([T.StructField("event_id", T.StringType(), False), T.StructField("t_ms", T.LongType(), False)])
_TIME = T.StructType([T.StructField("t_ms", T.LongType(), False)])


class SlidingProcessor(StatefulProcessor):
    """Per group: keep new rows in ``pending`` until the watermark passes them (one event-time
    timer, at the earliest pending time), then emit each with its count (:func:`sliding_counts`) and
    keep in ``history`` only the times a later row can still count. With nothing pending, a last
    timer at (latest time + size) clears the group's state.

    In rows: the group-by columns, ``event_id``, ``_t_ms`` (event time, epoch ms).
    Out rows: ``out_names`` = the group-by columns, ``event_id``, ``_t_ms``, the count (PySpark's
    row-based ``transformWithState`` reads output rows by field name: a positional ``Row`` fails
    with ``CANNOT_CONVERT_TYPE``)."""

    def __init__(self, size_ms: int, out_names: list[str]):
        self.size_ms = size_ms
        self.out_names = list(out_names)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", _PENDING)
        self.history = handle.getListState("history", _TIME)
        self.timer = handle.getValueState("timer_ms", _TIME)

    def _arm(self, at_ms: int) -> None:
        cur = self.timer.get()[0] if self.timer.exists() else None
        if cur == at_ms:
            return
        if cur is not None:
            self.handle.deleteTimer(cur)
        self.handle.registerTimer(at_ms)
        self.timer.update((at_ms,))

    def handleInputRows(self, key, rows: Iterator, timerValues: TimerValues) -> Iterator:
        fresh = [(r["event_id"], int(r["_t_ms"])) for r in rows]
        if fresh:
            self.pending.appendList(fresh)
            earliest = min(t for _, t in fresh)
            cur = self.timer.get()[0] if self.timer.exists() else None
            if cur is None or earliest < cur:
                self._arm(earliest)
        return iter(())

    def handleExpiredTimer(self, key, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo) -> Iterator:
        self.timer.clear()
        wm = timerValues.getCurrentWatermarkInMs()
        pend = list(self.pending.get()) if self.pending.exists() else []
        ids = [r[0] for r in pend]
        pend_ms = np.array([r[1] for r in pend], dtype=np.int64)
        hist = np.array([r[0] for r in self.history.get()] if self.history.exists() else [], dtype=np.int64)
        emit, counts, hist = sliding_counts(pend_ms, hist, wm, self.size_ms)
        for i, c in zip(np.flatnonzero(emit), counts):
            yield Row(**dict(zip(self.out_names, (*key, ids[i], int(pend_ms[i]), int(c)))))
        left = np.flatnonzero(~emit)
        if len(left):
            self.pending.put([(ids[i], int(pend_ms[i])) for i in left])
            self._arm(int(pend_ms[left].min()))
        else:
            self.pending.clear()
        if len(hist):
            self.history.put([(int(t),) for t in hist])
            if not len(left):
                self._arm(int(hist.max()) + self.size_ms + 1)
        else:
            self.history.clear()

    def close(self) -> None:
        pass


def sliding_frame(df: DataFrame, spec: AssetSpec) -> DataFrame:
    """A sliding window (``transform.sliding``): one output row per input row, with the number of
    rows of its group whose time is in ``[t - size, t]``, emitted once the watermark passes ``t``.
    Spark 4.1's ``transformWithState`` (:class:`SlidingProcessor`), event-time timers, RocksDB state
    store, output mode ``Append``.

    In: the upstream stream (needs ``event_id``, the group-by columns and ``time_column``).
    Out: ``transform.sliding.out_columns`` (``event_id``, group-by columns, time column, count)."""
    sl = SlidingTransform.of(spec)
    assert spec.watermark is not None
    size_ms = int(interval_seconds(sl.size) * 1000)
    df = df.withWatermark(spec.watermark.column, spec.watermark.delay)
    if sl.filter:
        df = df.where(F.expr(sl.filter))
    keys = list(sl.group_by)
    extra = [c for c in (sl.columns or []) if c not in ("event_id", sl.time_column, *keys)]
    if extra:
        raise ValueError(f"{spec.where}: transform.sliding.columns: only event_id, the group-by columns and "
                         f"{sl.time_column} can be output (got {extra})")
    # The watermark's column stays in the plan: event-time timers need it.
    inp = df.select(*keys, "event_id", F.col(sl.time_column), F.unix_millis(F.col(sl.time_column)).alias("_t_ms"))
    out_schema = T.StructType(
        [inp.schema[k] for k in keys]
        + [T.StructField("event_id", T.StringType()), T.StructField("_t_ms", T.LongType()),
           T.StructField(sl.output, T.LongType())])
    result = inp.groupBy(*keys).transformWithState(
        SlidingProcessor(size_ms, out_schema.fieldNames()), out_schema, outputMode="Append", timeMode="EventTime")
    cols = {"event_id": F.col("event_id"), sl.time_column: F.timestamp_millis("_t_ms").alias(sl.time_column),
            **{k: F.col(k) for k in keys}}
    return result.select(*[cols[c] for c in sl.out_columns[:-1]], F.col(sl.output))


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``sliding`` query: :func:`sliding_frame` into the asset's sink."""
    return frame_sink(spark, sliding_frame(source, spec), spec, version, settings)


def late_sliding_rows(spec: AssetSpec, inputs: dict[str, DataFrame], watermark_ms: int) -> LateFrame:
    """The rows of a micro-batch's input (``inputs[source.asset]``) that the sliding window's
    ``transformWithState`` operator drops at the watermark ``watermark_ms`` (epoch ms): after the
    asset's ``filter``, those whose time column is at or before it. Spark counts each row
    (``rows``). Out: ``_row``, ``_event_id``, ``_json``, ``event_time``, ``reason``, ``_unit``."""
    sl = SlidingTransform.of(spec)
    assert spec.source.asset is not None
    df = inputs[spec.source.asset]
    if sl.filter:
        df = df.where(F.expr(sl.filter))
    late = df.where(F.col(sl.time_column) <= F.timestamp_millis(F.lit(watermark_ms)))
    return LateFrame(late.select("_row", "_event_id", "_json", F.col(sl.time_column).alias("event_time"),
                                 F.lit(f"row: {sl.time_column}").alias("reason"), F.col("_row").alias("_unit")),
                     "rows")


KIND = Kind(model=SlidingTransform, start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",),
            dropped_rows=late_sliding_rows)
