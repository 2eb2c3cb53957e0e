"""``raw`` (bronze): each Kafka record as it is (``key``, ``value`` bytes, ``topic``,
``partition``, ``offset``, ``timestamp``), appended once per micro-batch
(:class:`kappa.streaming.writers.AppendWriter`: Delta skips a batch whose transaction id it has
already committed, Delta docs, "Idempotent table writes in foreachBatch")."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.parse import KAFKA_COLUMNS
from kappa.streaming.writers import frame_sink


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``raw`` query: the records' :data:`~kappa.streaming.parse.KAFKA_COLUMNS` into the sink."""
    return frame_sink(spark, source.select(*KAFKA_COLUMNS), spec, version, settings)


KIND = Kind(name="raw", start=start, reads_kafka=True, forget="record_key")
