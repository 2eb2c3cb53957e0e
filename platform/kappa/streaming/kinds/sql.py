"""``sql``: one ``SELECT … FROM input`` over the upstream stream, registered as the temporary view
``input`` of the query's session. This module is the whole kind."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from typing import Annotated

from kappa.spec import AssetSpec, TransformModel
from kappa.spec.base import query
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import frame_sink


class SqlTransform(TransformModel):
    """``sql: SELECT … FROM input``: one query over the upstream stream, read as the view
    ``input`` (the only relation the run-time policy lets it read). Appends."""

    kind = "sql"
    value_field = "sql"
    row_expectations = True

    sql: Annotated[str, query(lambda model: ("input",))]


def sql_frame(spark: SparkSession, df: DataFrame, spec: AssetSpec) -> DataFrame:
    """``transform.sql`` over ``df`` (the upstream stream, as the view ``input``); the output
    schema is the statement's."""
    df.createOrReplaceTempView("input")
    return spark.sql(SqlTransform.of(spec).sql)


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``sql`` query: :func:`sql_frame` into the asset's sink."""
    return frame_sink(spark, sql_frame(spark, source, spec), spec, version, settings)


KIND = Kind(model=SqlTransform, start=start)
