"""``join`` (gold): a stream–stream join of the source asset with ``transform.join.right.asset``
(:class:`JoinTransform`, :func:`join_frame`), appended once a row is final. Rows behind the
watermark are dropped by Spark and named afterwards (:func:`late_join_rows`,
:mod:`kappa.streaming.late`).

Spark rules relied on (Structured Streaming guide, "Stream-stream Joins"):

* Both inputs are buffered in the join state so that a row can match rows of the other side that
  arrive later. With a watermark on each side and an event-time range condition, Spark knows when a
  row can no longer match and drops it from the state (state cleanup).
* A left outer join emits a matched row as soon as both rows are there, and an unmatched left row
  (right columns null) only once the watermark has passed the end of its range: that is when
  Spark knows no right row can come. Watermarks and the range condition are therefore mandatory
  for outer joins (checked at load, :meth:`JoinTransform.check`).
* The query runs in ``append`` output mode (the only mode for stream–stream joins): each row is
  emitted once, so each micro-batch's rows are appended (:class:`kappa.streaming.writers.AppendWriter`).
* With two watermarks, Spark's global watermark is the minimum of the two
  (``spark.sql.streaming.multipleWatermarkPolicy`` = ``min``): a side whose events stop holds back
  the emission of unmatched rows.
* Late rows: in micro-batch N each side drops its input rows whose watermark column is at or before
  the previous batch's global watermark (``StreamingSymmetricHashJoinExec``'s
  ``OneSideHashJoiner.storeAndJoinWithOtherSide``, ``watermarkPredicateForDataForLateEvents``); a
  side without its watermark column in its input drops nothing. Rows a side filters before the join
  (a null join key, on a side whose rows can only match: Spark infers ``IS NOT NULL`` from the
  condition) never reach the operator. :func:`late_join_rows` names them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel, Watermark
from kappa.spec.base import NAME, PLAIN, StrictModel, check_interval
from kappa.streaming.kinds.base import Kind, LateFrame
from kappa.streaming.sources import upstream_stream
from kappa.streaming.writers import frame_sink


class JoinTimeRange(StrictModel):
    """The event-time range condition of a stream–stream join:
    ``right.<right_column> BETWEEN left.<left_column> - <lower> AND left.<left_column> + <upper>``.
    Spark needs it (with watermarks on both sides) to know when a row can no longer match, so it
    can drop the row from the join state and, in an outer join, emit it unmatched."""

    left_column: Annotated[str, NAME]
    right_column: Annotated[str, NAME]
    lower: Annotated[str, PLAIN] = "0 seconds"
    upper: Annotated[str, PLAIN] = "0 seconds"

    @field_validator("lower", "upper")
    @classmethod
    def _intervals(cls, v: str) -> str:
        return check_interval(v)


class JoinRight(StrictModel):
    """The right side of a stream–stream join: an upstream asset, its watermark, the columns it adds."""

    asset: Annotated[str, PLAIN]
    watermark: Watermark | None = None
    columns: Annotated[list[str], NAME] = Field(min_length=1)


class JoinTransform(TransformModel):
    """A stream–stream join of the source asset (left) with ``right.asset``: equality on ``keys``
    plus the ``time_range`` condition. Output: every left column, the right ``columns`` and, for a
    left outer join, the boolean ``matched_column`` (false for a left row emitted without a match,
    once the watermark has passed it). Spark's rule (Structured Streaming guide, "Stream-stream
    Joins"): an outer join needs a watermark on both sides and an event-time range condition."""

    kind = "join"
    row_expectations = True

    type: Literal["inner", "left_outer"]
    right: JoinRight
    keys: Annotated[list[str], NAME] = Field(min_length=1)
    time_range: JoinTimeRange | None = None
    matched_column: Annotated[str | None, NAME] = None

    def check(self, spec: AssetSpec) -> None:
        """Spark's rules for stream–stream joins (Structured Streaming guide, "Stream-stream Joins",
        "Outer Joins with Watermarking"), checked at load rather than when the query starts."""
        j = self
        if j.right.asset == spec.source.asset:
            raise ValueError("transform.join.right.asset: a join needs two different upstream assets")
        if j.type == "left_outer":
            rule = ("Spark's rule for outer stream-stream joins: watermarks on both sides and an event-time "
                    "range condition are mandatory, so Spark knows when a row can no longer match and can "
                    "emit it unmatched")
            if spec.watermark is None:
                raise ValueError(f"watermark: the left side has no watermark. {rule}")
            if j.right.watermark is None:
                raise ValueError(f"transform.join.right.watermark: the right side has no watermark. {rule}")
            if j.time_range is None:
                raise ValueError(f"transform.join.time_range: no event-time range condition. {rule}")
            if j.time_range.left_column != spec.watermark.column:
                raise ValueError("transform.join.time_range.left_column must equal watermark.column")
            if j.time_range.right_column != j.right.watermark.column:
                raise ValueError("transform.join.time_range.right_column must equal transform.join.right.watermark.column")
        elif j.matched_column is not None:
            raise ValueError("transform.join.matched_column: only a left_outer join has unmatched rows")

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """``event_id``: a left row's id (a left row joins each right row once)."""
        return ["event_id"]

    def upstream(self, spec: AssetSpec) -> list[str]:
        """The right side's asset."""
        return [self.right.asset]


def right_columns(spec: AssetSpec) -> list[str]:
    """The right side's columns that enter the join: the keys, ``right.columns`` and the time
    range's right column, each once, in that order."""
    j = JoinTransform.of(spec)
    return list(dict.fromkeys([*j.keys, *j.right.columns] + ([j.time_range.right_column] if j.time_range else [])))


def join_frame(left: DataFrame, right: DataFrame, spec: AssetSpec) -> DataFrame:
    """Join the source stream ``left`` with the stream ``right`` of ``transform.join.right.asset``.

    Condition: ``left.k = right.k`` for each ``keys`` column, and ``right.<right_column>`` between
    ``left.<left_column> - lower`` and ``left.<left_column> + upper``.
    Output: every ``left`` column (in order), then ``right.columns``, then the boolean
    ``matched_column`` if declared (false for unmatched left rows of a left outer join)."""
    j = JoinTransform.of(spec)
    if spec.watermark is not None:
        left = left.withWatermark(spec.watermark.column, spec.watermark.delay)
    if j.right.watermark is not None:
        right = right.withWatermark(j.right.watermark.column, j.right.watermark.delay)
    clash = [c for c in j.right.columns if c in left.columns]
    if clash:
        raise ValueError(f"{spec.where}: transform.join.right.columns: {clash} are already left columns")
    right_cols = right_columns(spec)
    r = right.select(*right_cols, F.lit(True).alias("_matched")).alias("r")
    l = left.alias("l")
    cond = [F.col(f"l.{k}") == F.col(f"r.{k}") for k in j.keys]
    if j.time_range is not None:
        tr = j.time_range
        lt, rt = F.col(f"l.{tr.left_column}"), F.col(f"r.{tr.right_column}")
        cond += [rt >= lt - F.expr(f"INTERVAL {tr.lower}"), rt <= lt + F.expr(f"INTERVAL {tr.upper}")]
    how = {"inner": "inner", "left_outer": "left_outer"}[j.type]
    joined = l.join(r, cond, how)
    cols = [F.col(f"l.{c}").alias(c) for c in left.columns] + [F.col(f"r.{c}").alias(c) for c in j.right.columns]
    if j.matched_column:
        cols.append(F.coalesce(F.col("r._matched"), F.lit(False)).alias(j.matched_column))
    return joined.select(*cols)


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``join`` query: the source joined with the right asset's pinned version, as a stream."""
    right = upstream_stream(spark, version, settings, JoinTransform.of(spec).right.asset)
    return frame_sink(spark, join_frame(source, right, spec), spec, version, settings)


def late_join_rows(spec: AssetSpec, inputs: dict[str, DataFrame], watermark_ms: int) -> LateFrame:
    """The rows of a micro-batch's input that the stream-stream join drops at the watermark
    ``watermark_ms`` (epoch ms): on each side with a watermark whose column enters the join, the
    rows whose watermark column is at or before it, less the rows Spark filters out before the join
    (a null join key on the right side, and on the left for an inner join). ``inputs``: the batch
    of each side's upstream asset (missing or empty when that side read nothing). Spark counts
    each dropped row (``rows``). Out: ``_row``, ``_event_id``, ``_json``, ``event_time``,
    ``reason``, ``_unit``."""
    j = JoinTransform.of(spec)
    assert spec.source.asset is not None
    wm = F.timestamp_millis(F.lit(watermark_ms))
    sides = []
    if spec.watermark is not None:
        sides.append(("left", spec.source.asset, spec.watermark.column, j.type == "inner"))
    if j.right.watermark is not None and j.right.watermark.column in right_columns(spec):
        sides.append(("right", j.right.asset, j.right.watermark.column, True))
    parts = []
    for side, asset, column, keys_not_null in sides:
        df = inputs.get(asset)
        if df is None:
            continue
        if keys_not_null:
            for k in j.keys:
                df = df.where(F.col(k).isNotNull())
        parts.append(df.where(F.col(column) <= wm).select(
            "_row", "_event_id", "_json", F.col(column).alias("event_time"),
            F.lit(f"{side} row ({asset}): {column}").alias("reason"), F.col("_row").alias("_unit")))
    if not parts:  # no side drops anything: an empty frame of the same columns
        any_input = next(iter(inputs.values()))
        parts.append(any_input.where(F.lit(False)).select(
            "_row", "_event_id", "_json", F.lit(None).cast("timestamp").alias("event_time"),
            F.lit(None).cast("string").alias("reason"), F.col("_row").alias("_unit")))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return LateFrame(out, "rows")


KIND = Kind(model=JoinTransform, start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",),
            dropped_rows=late_join_rows)
