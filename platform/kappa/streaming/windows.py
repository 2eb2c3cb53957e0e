"""Event-time windows: tumbling, hopping and session windows (Spark's window operators).

Spark rules relied on (Structured Streaming guide, "Window Operations on Event Time", "Output
Modes", "Handling Late Data and Watermarking"):

* Tumbling and hopping windows run in ``update`` output mode: each micro-batch emits the windows it
  changed, upserted by MERGE on (group-by columns, ``window_start``); the state of a window is
  dropped once the watermark passes its end.
* Session windows cannot run in ``update`` mode (Spark refuses it: a session can merge with a later
  one, so an emitted session may disappear). They run in ``append`` mode: a session is emitted once,
  when the watermark passes its end, and appended to the Delta table.

Late rows: a window aggregation drops, in micro-batch N, the partial aggregates whose window ends at
or before the watermark of batch N-1 (``StateStoreSaveExec`` / ``SessionWindowStateStoreRestoreExec``
filter with ``watermarkPredicateForDataForLateEvents``: ``window.end <= watermark``; Spark 3.5+'s
``PropagateWatermarkSimulator.getInputWatermarkForLateEvents`` is the previous batch's watermark).
:func:`kappa.streaming.kinds.window.late_window_rows` names the input rows behind them
(:mod:`kappa.streaming.late`).

The sliding window of DDIA ch. 11 (one window per event) is a kind of its own:
:mod:`kappa.streaming.kinds.sliding`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappa.spec import AssetSpec


def window_frame(df: DataFrame, spec: AssetSpec) -> DataFrame:
    """Event-time window aggregation of ``df`` (``transform.window``).

    Output columns: the group-by columns, ``window_start``, ``window_end`` (``session_start``,
    ``session_end`` for a session window; timestamps, UTC), then one column per declared aggregation,
    in declaration order."""
    w = spec.transform.window
    assert w is not None and spec.watermark is not None
    df = df.withWatermark(spec.watermark.column, spec.watermark.delay)
    if w.filter:
        df = df.where(F.expr(w.filter))
    if w.type == "tumbling":
        win = F.window(w.time_column, w.size)
    elif w.type == "hopping":
        win = F.window(w.time_column, w.size, w.slide)
    else:
        win = F.session_window(w.time_column, w.gap)
    aggs = [F.expr(expr).alias(name) for name, expr in w.aggregations.items()]
    grouped = df.groupBy(win.alias("window"), *w.group_by).agg(*aggs)
    start, end = w.bounds
    return grouped.select(
        *w.group_by,
        F.col("window.start").alias(start),
        F.col("window.end").alias(end),
        *w.aggregations.keys(),
    )

