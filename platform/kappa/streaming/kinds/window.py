"""``window`` (gold): an event-time window aggregation, tumbling, hopping or session
(:func:`kappa.streaming.windows.window_frame`). Tumbling and hopping windows run in ``update`` mode
and are upserted by MERGE on (group-by keys, window start), so the table holds every window's current
value, open windows included; session windows are appended once the watermark closes them
(:func:`kappa.streaming.writers.frame_sink`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
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


def _closes_on_watermark(spec: AssetSpec) -> bool:
    # Append mode (session windows): a window is emitted only once the watermark passes its end, so
    # an idle stream needs the no-data batch that moves it. Update mode emits on every change.
    return spec.output_mode == "append"


KIND = Kind(name="window", start=start, stateful=True, gate_checks=("late_rows",),
            no_data_batches=_closes_on_watermark)
