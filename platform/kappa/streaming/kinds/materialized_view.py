"""``materialized_view``: a table–table join, SQL over current-state tables kept up to date from
their change data feeds (:class:`kappa.streaming.table_joins.ViewWriter`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.table_joins import ViewWriter, view_changes


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``materialized_view`` query: the tables' change feeds (not ``source``) into :class:`ViewWriter`."""
    return view_changes(spark, spec, version, settings).writeStream.foreachBatch(
        ViewWriter(spark, spec, version, settings))


KIND = Kind(name="materialized_view", start=start)
