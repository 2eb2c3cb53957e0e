"""``join`` (gold): a stream–stream join of the source asset with ``transform.join.right.asset``
(:func:`kappa.streaming.joins.join_frame`), appended once a row is final. Rows behind the
watermark are dropped by Spark and named afterwards (:func:`late_join_rows`,
:mod:`kappa.streaming.late`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind, LateFrame
from kappa.streaming.joins import join_frame, right_columns
from kappa.streaming.sources import upstream_stream
from kappa.streaming.writers import frame_sink


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``join`` query: the source joined with the right asset's pinned version, as a stream."""
    assert spec.transform.join is not None
    right = upstream_stream(spark, version, settings, spec.transform.join.right.asset)
    return frame_sink(spark, join_frame(source, right, spec), spec, version, settings)


def late_join_rows(spec: AssetSpec, inputs: dict[str, DataFrame], watermark_ms: int) -> LateFrame:
    """The rows of a micro-batch's input that the stream-stream join drops at the watermark
    ``watermark_ms`` (epoch ms): on each side with a watermark whose column enters the join, the
    rows whose watermark column is at or before it, less the rows Spark filters out before the join
    (a null join key on the right side, and on the left for an inner join). ``inputs``: the batch
    of each side's upstream asset (missing or empty when that side read nothing). Spark counts
    each dropped row (``rows``). Out: ``_row``, ``_event_id``, ``_json``, ``event_time``,
    ``reason``, ``_unit``."""
    j = spec.transform.join
    assert j is not None and spec.source.asset is not None
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


KIND = Kind(name="join", start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",),
            dropped_rows=late_join_rows)
