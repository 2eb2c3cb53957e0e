"""Stream–stream joins (``transform.join``).

Spark rules relied on (Structured Streaming guide, "Stream-stream Joins"):

* Both inputs are buffered in the join state so that a row can match rows of the other side that
  arrive later. With a watermark on each side and an event-time range condition, Spark knows when a
  row can no longer match and drops it from the state (state cleanup).
* A left outer join emits a matched row as soon as both rows are there, and an unmatched left row
  (right columns null) only once the watermark has passed the end of its range: that is when
  Spark knows no right row can come. Watermarks and the range condition are therefore mandatory
  for outer joins (checked at load, see :meth:`kappa.spec.AssetSpec._check_join`).
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
  condition) never reach the operator. :func:`kappa.streaming.kinds.join.late_join_rows` names them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.spec import AssetSpec


def right_columns(spec: AssetSpec) -> list[str]:
    """The right side's columns that enter the join: the keys, ``right.columns`` and the time
    range's right column, each once, in that order."""
    j = spec.transform.join
    assert j is not None
    return list(dict.fromkeys([*j.keys, *j.right.columns] + ([j.time_range.right_column] if j.time_range else [])))


def join_frame(left: DataFrame, right: DataFrame, spec: AssetSpec) -> DataFrame:
    """Join the source stream ``left`` with the stream ``right`` of ``transform.join.right.asset``.

    Condition: ``left.k = right.k`` for each ``keys`` column, and ``right.<right_column>`` between
    ``left.<left_column> - lower`` and ``left.<left_column> + upper``.
    Output: every ``left`` column (in order), then ``right.columns``, then the boolean
    ``matched_column`` if declared (false for unmatched left rows of a left outer join)."""
    j = spec.transform.join
    assert j is not None
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
