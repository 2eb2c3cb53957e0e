"""``raw`` (bronze): each Kafka record as it is (``key``, ``value`` bytes, ``topic``,
``partition``, ``offset``, ``timestamp``), appended once per micro-batch
(:class:`kappa.streaming.writers.AppendWriter`: Delta skips a batch whose transaction id it has
already committed, Delta docs, "Idempotent table writes in foreachBatch")."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel
from kappa.streaming.kinds.base import Kind
from kappa.streaming.records import KAFKA_COLUMNS
from kappa.streaming.writers import frame_sink


class RawTransform(TransformModel):
    """``raw: {}``: nothing to declare. Reads Kafka; appends; its rows are keyed by the record's
    coordinates (``topic``, ``partition``, ``offset``)."""

    kind = "raw"
    reads_kafka = True
    row_expectations = True
    archives = True

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """A Kafka record's coordinates."""
        return ["topic", "partition", "offset"]


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``raw`` query: the records' :data:`~kappa.streaming.records.KAFKA_COLUMNS` into the sink."""
    return frame_sink(spark, source.select(*KAFKA_COLUMNS), spec, version, settings)


KIND = Kind(model=RawTransform, start=start, forget="record_key")
