"""``changelog`` (silver from a Debezium changelog topic): a current-state table or an SCD2 history
(:class:`kappa.streaming.changelog.ChangelogWriter`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.changelog import ChangelogWriter


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``changelog`` query: change events into :class:`ChangelogWriter`."""
    return source.writeStream.foreachBatch(ChangelogWriter(spark, spec, version, settings))


def _history(spec: AssetSpec) -> bool:
    # A history keeps every version of every row; a compacted topic keeps only the latest per key.
    assert spec.transform.changelog is not None
    return spec.transform.changelog.mode == "history"


KIND = Kind(name="changelog", start=start, reads_kafka=True, quarantines=True, forget="key_columns",
            full_log=_history)
