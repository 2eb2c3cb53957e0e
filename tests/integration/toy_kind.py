"""``echo``: a toy transform kind, whole in this one module (docs/ARCHITECTURE.md, "Where a new kind
goes"): each Kafka record's value as text, with its key and coordinates, keeping the records a SQL
predicate accepts. Nothing else in the repository names it; ``tests/integration/test_toy_kind.py``
imports this module and finds the kind validated, run, gated, forgotten and admitted from the UI."""

from __future__ import annotations

from typing import Annotated

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel
from kappa.spec.base import EXPRESSION, NAME
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import frame_sink


class EchoTransform(TransformModel):
    """``echo: {column: text, keep: "<predicate>"}``: the value as the string column ``column``;
    ``keep`` (a SQL predicate over it) drops the records it is not true for. Reads Kafka; appends;
    keyed by the record's coordinates."""

    kind = "echo"
    reads_kafka = True

    column: Annotated[str, NAME] = "text"
    keep: Annotated[str | None, EXPRESSION] = None

    def check(self, spec: AssetSpec) -> None:
        """No watermark: nothing here is event time."""
        if spec.watermark is not None:
            raise ValueError("watermark: an echo asset has no event time")

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """A record's coordinates."""
        return ["topic", "partition", "offset"]


def echo_frame(source: DataFrame, spec: AssetSpec) -> DataFrame:
    """``key`` and ``topic``, ``partition``, ``offset`` of each record, and its value as the string
    column ``column``, for the records ``keep`` accepts."""
    echo = EchoTransform.of(spec)
    out = source.select("key", "topic", "partition", "offset", F.col("value").cast("string").alias(echo.column))
    return out.where(F.expr(echo.keep)) if echo.keep else out


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``echo`` query: :func:`echo_frame` appended (:func:`kappa.streaming.writers.frame_sink`)."""
    return frame_sink(spark, echo_frame(source, spec), spec, version, settings)


KIND = Kind(model=EchoTransform, start=start, forget="record_key")
