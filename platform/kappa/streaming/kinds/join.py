"""``join`` (gold): a stream–stream join of the source asset with ``transform.join.right.asset``
(:func:`kappa.streaming.joins.join_frame`), appended once a row is final."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.joins import join_frame
from kappa.streaming.sources import upstream_stream
from kappa.streaming.writers import frame_sink


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``join`` query: the source joined with the right asset's pinned version, as a stream."""
    assert spec.transform.join is not None
    right = upstream_stream(spark, version, settings, spec.transform.join.right.asset)
    return frame_sink(spark, join_frame(source, right, spec), spec, version, settings)


KIND = Kind(name="join", start=start, stateful=True, gate_checks=("late_rows",))
