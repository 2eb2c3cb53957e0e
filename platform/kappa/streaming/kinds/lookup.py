"""``lookup``: a stream–table join, each row of the stream with columns of changelog tables as of its
event time or as they are (:class:`kappa.streaming.table_joins.LookupWriter`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.table_joins import LookupWriter


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``lookup`` query: the source stream into :class:`LookupWriter`."""
    return source.writeStream.foreachBatch(LookupWriter(spark, spec, version, settings))


KIND = Kind(name="lookup", start=start)
