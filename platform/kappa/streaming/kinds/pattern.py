"""``pattern`` (gold, complex event processing): a declarative pattern matched per key in
event-time order (:func:`kappa.streaming.pattern.pattern_frame`); matches and late rows written by
:class:`kappa.streaming.pattern.PatternWriter`."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.pattern import PatternWriter, pattern_frame


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``pattern`` query: the matches, in append mode, into :class:`PatternWriter`."""
    return pattern_frame(source, spec).writeStream.outputMode("append").foreachBatch(
        PatternWriter(spark, spec, version, settings))


KIND = Kind(name="pattern", start=start, stateful=lambda spec: True, keeps_late_rows=True, gate_checks=("late_rows",))
