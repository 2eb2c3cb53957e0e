"""``window`` (gold): an event-time window aggregation, tumbling, hopping or session
(:func:`kappa.streaming.windows.window_frame`). Tumbling and hopping windows run in ``update`` mode
and are upserted by MERGE on (group-by keys, window start), so the table holds every window's current
value, open windows included; session windows are appended once the watermark closes them
(:func:`kappa.streaming.writers.frame_sink`).

Rows behind the watermark are dropped by Spark and named afterwards (:func:`late_window_rows`,
:mod:`kappa.streaming.late`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind, LateFrame
from kappa.streaming.windows import window_frame
from kappa.streaming.writers import frame_sink


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``window`` query: :func:`~kappa.streaming.windows.window_frame` into the asset's sink. In
    update mode each micro-batch holds one row per changed window, and its MERGE keys include the
    window's keys, so the batch is merged as it is (no dedup)."""
    w = spec.transform.window
    assert w is not None
    unique = spec.output_mode == "update" and set(w.keys) <= set(spec.merge_keys)
    return frame_sink(spark, window_frame(source, spec), spec, version, settings, unique_keys=unique)


def late_window_rows(spec: AssetSpec, inputs: dict[str, DataFrame], watermark_ms: int) -> LateFrame:
    """The rows of a micro-batch's input (``inputs[source.asset]``, a batch DataFrame) that Spark's
    window aggregation drops at the watermark ``watermark_ms`` (epoch ms), after the asset's
    ``filter``: a tumbling or hopping row in a window whose end is at or before it, one output row
    per such window (Spark's own ``window()`` on the batch assigns them); a session row whose own
    session ``[t, t + gap)`` ends at or before it (Spark merges sessions only after dropping).

    Spark counts partial aggregates, not rows (:data:`~kappa.streaming.kinds.base.LateCount`):
    tumbling and hopping windows one per (group-by values, window), after the shuffle (``units``);
    session windows one per (group-by values, time) and input partition (``units_in_partition``).
    Out: ``_row``, ``_event_id``, ``_json``, ``event_time``, ``reason``, ``_unit``."""
    w = spec.transform.window
    assert w is not None and spec.watermark is not None and spec.source.asset is not None
    df = inputs[spec.source.asset]
    if w.filter:
        df = df.where(F.expr(w.filter))
    wm = F.timestamp_millis(F.lit(watermark_ms))
    t = F.col(w.time_column)
    keys = [F.col(k) for k in w.group_by]
    if w.type == "session":
        end = t + F.expr(f"INTERVAL {w.gap}")
        late = df.where(end <= wm).withColumn("_start", t).withColumn("_end", end)
        count = "units_in_partition"
    else:
        win = F.window(w.time_column, w.size) if w.type == "tumbling" else F.window(w.time_column, w.size, w.slide)
        late = (df.withColumn("_w", win).where(F.col("_w.end") <= wm)
                .withColumn("_start", F.col("_w.start")).withColumn("_end", F.col("_w.end")))
        count = "units"
    word = "session" if w.type == "session" else "window"
    return LateFrame(late.select(
        "_row", "_event_id", "_json", t.alias("event_time"),
        F.format_string(f"{word} [%s, %s) of %s", F.col("_start").cast("string"), F.col("_end").cast("string"),
                        F.to_json(F.struct(*keys)) if keys else F.lit("{}")).alias("reason"),
        F.to_json(F.struct(*keys, F.col("_start"))).alias("_unit")), count)


KIND = Kind(name="window", start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",),
            dropped_rows=late_window_rows)
# No-data micro-batches stay on for update-mode windows too: without the one that follows a batch,
# Spark's late-events watermark (the previous batch's) lags a whole batch, so after a pause the
# first batch accepts input a run with the no-data batch would drop, and a replay of the same log
# could differ from the continuous run in what it drops (kappa.streaming.late names by that rule).
