"""``window`` (gold): an event-time window aggregation, tumbling, hopping or session
(:class:`WindowTransform`, :func:`window_frame`). Tumbling and hopping windows run in ``update`` mode
and are upserted by MERGE on (group-by keys, window start), so the table holds every window's current
value, open windows included; session windows are appended once the watermark closes them
(:func:`kappa.streaming.writers.frame_sink`).

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
:func:`late_window_rows` names the input rows behind them (:mod:`kappa.streaming.late`).

The sliding window of DDIA ch. 11 (one window per event) is a kind of its own:
:mod:`kappa.streaming.kinds.sliding`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel
from kappa.spec.base import EXPRESSION, NAME, PLAIN, check_interval, interval_seconds
from kappa.streaming.kinds.base import Kind, LateFrame
from kappa.streaming.writers import frame_sink


class WindowTransform(TransformModel):
    """Event-time window aggregation. ``size`` for tumbling/hopping, ``slide`` for hopping,
    ``gap`` for session windows; ``aggregations`` maps output column -> Spark SQL aggregate;
    ``filter`` (a Spark SQL predicate) keeps only the rows it is true for, after the watermark.

    Output: the group-by columns, ``window_start``/``window_end`` (``session_start``/``session_end``
    for session windows), then the aggregations. Spark's window alignment: tumbling and hopping
    windows start at multiples of ``slide`` since the epoch (1970-01-01 UTC), so a row falls in
    ``size / slide`` hopping windows; a session window is ``[first event, last event + gap)``
    (``F.session_window``)."""

    kind = "window"
    row_expectations = True

    type: Literal["tumbling", "hopping", "session"]
    time_column: Annotated[str, NAME]
    size: Annotated[str | None, PLAIN] = None
    slide: Annotated[str | None, PLAIN] = None
    gap: Annotated[str | None, PLAIN] = None
    group_by: Annotated[list[str], NAME] = Field(default_factory=list)
    aggregations: Annotated[dict[str, str], EXPRESSION] = Field(min_length=1)
    filter: Annotated[str | None, EXPRESSION] = None

    @field_validator("size", "slide", "gap")
    @classmethod
    def _intervals(cls, v: str | None) -> str | None:
        return None if v is None else check_interval(v)

    @model_validator(mode="after")
    def _shape(self) -> "WindowTransform":
        need = {"tumbling": {"size"}, "hopping": {"size", "slide"}, "session": {"gap"}}[self.type]
        for name in ("size", "slide", "gap"):
            present = getattr(self, name) is not None
            if name in need and not present:
                raise ValueError(f"a {self.type} window needs '{name}'")
            if name not in need and present:
                raise ValueError(f"a {self.type} window takes no '{name}'")
        if self.type == "hopping" and interval_seconds(self.slide) > interval_seconds(self.size):  # type: ignore[arg-type]
            raise ValueError("hopping window: 'slide' must not exceed 'size'")
        return self

    @property
    def bounds(self) -> tuple[str, str]:
        """The output's window start and end column names."""
        return ("session_start", "session_end") if self.type == "session" else ("window_start", "window_end")

    @property
    def keys(self) -> list[str]:
        """The key of the output: group-by columns plus the window start."""
        return [*self.group_by, self.bounds[0]]

    def check(self, spec: AssetSpec) -> None:
        """A watermark on ``time_column``; a session window is not merged."""
        if spec.watermark is None:
            raise ValueError("a window transform needs a watermark (watermark.column, watermark.delay)")
        if spec.watermark.column != self.time_column:
            raise ValueError("watermark.column must equal transform.window.time_column")
        if self.type == "session" and spec.sink.mode == "merge":
            raise ValueError(
                "sink.mode: a session window is written in append mode once the watermark closes a "
                "session (Spark forbids output mode 'update' for session windows, and a MERGE on "
                "session_start cannot remove sessions that later merge into one); remove sink.mode")

    def sink_mode(self, spec: AssetSpec) -> Literal["append", "merge"]:
        """``merge`` for tumbling and hopping windows (an open window's row is updated by MERGE on
        :attr:`keys`); ``append`` for session windows, emitted once closed."""
        return "append" if self.type == "session" else "merge"

    def output_mode(self, spec: AssetSpec) -> Literal["append", "update"]:
        """``update`` for tumbling and hopping windows upserted by MERGE, else ``append``."""
        return "update" if self.type != "session" and spec.sink_mode == "merge" else "append"

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """:attr:`keys`: the group-by columns and the window start."""
        return self.keys


def window_frame(df: DataFrame, spec: AssetSpec) -> DataFrame:
    """Event-time window aggregation of ``df`` (``transform.window``).

    Output columns: the group-by columns, ``window_start``, ``window_end`` (``session_start``,
    ``session_end`` for a session window; timestamps, UTC), then one column per declared aggregation,
    in declaration order."""
    w = WindowTransform.of(spec)
    assert spec.watermark is not None
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



def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``window`` query: :func:`window_frame` into the asset's sink. In
    update mode each micro-batch holds one row per changed window, and its MERGE keys include the
    window's keys, so the batch is merged as it is (no dedup)."""
    w = WindowTransform.of(spec)
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
    w = WindowTransform.of(spec)
    assert spec.watermark is not None and spec.source.asset is not None
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


KIND = Kind(model=WindowTransform, start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",),
            dropped_rows=late_window_rows)
# No-data micro-batches stay on for update-mode windows too: without the one that follows a batch,
# Spark's late-events watermark (the previous batch's) lags a whole batch, so after a pause the
# first batch accepts input a run with the no-data batch would drop, and a replay of the same log
# could differ from the continuous run in what it drops (kappa.streaming.late names by that rule).
