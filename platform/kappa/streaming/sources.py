"""The input stream of one asset version: Kafka topics from their earliest offsets (less forgotten
keys) or an upstream version's Delta table as a stream."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from kappa.config import Settings
from kappa.delta.forgotten import forgotten_condition
from kappa.delta.registry import Registry, Version
from kappa.spec import AssetSpec


def read_source(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings) -> DataFrame:
    """The input stream of ``spec``: the Kafka topics from their earliest offsets, or the upstream
    version's Delta table. Kafka columns: key, value (binary), topic, partition, offset, timestamp,
    timestampType, headers (Spark's Kafka integration guide, "Reading Data from Kafka")."""
    if spec.source.kafka is not None:
        src = spec.source.kafka
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.bootstrap_servers)
            .option("subscribe", ",".join(src.topics))
            # Every version reads the whole retained log; a gap in it must fail, not be skipped.
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "true")
            .option("includeHeaders", "true")
            .option("groupIdPrefix", settings.kafka_group_id_prefix or f"kappa-{spec.name}-v{version.version}-")
        )
        for key, value in settings.kafka_client_options().items():
            reader = reader.option(f"kafka.{key}", value)
        if src.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", src.max_offsets_per_trigger)
        records = reader.load()
        # Keys forgotten by `kappa forget` never enter a table again (read once per query start).
        forgotten = forgotten_condition(settings, list(src.topics))
        return records if forgotten is None else records.where(~forgotten)
    assert spec.source.asset is not None
    return upstream_stream(spark, version, settings, spec.source.asset)


def upstream_stream(spark: SparkSession, version: Version, settings: Settings, upstream: str) -> DataFrame:
    """The Delta table of the ``upstream`` asset's version pinned by ``version``, as a stream."""
    path = Registry(settings).upstream_of(version, upstream).table_path
    # A forget DELETEs rows from the upstream table; a running version keeps its results (the
    # forget replays the promoted aggregates) instead of failing on the non-append commit.
    return spark.readStream.format("delta").option("skipChangeCommits", "true").load(str(path))
