"""The input stream of one asset version: Kafka topics from their earliest offsets (less forgotten
keys) or an upstream version's Delta table as a stream.

Back-pressure: a query reading Kafka reads at most ``maxOffsetsPerTrigger`` records per micro-batch
(Spark's Kafka integration guide; the limit is split across partitions by their lag), from
:meth:`kappa.config.Settings.kafka_batch_limit`: the asset's declared bound in every trigger mode,
else ``KAPPA_MAX_OFFSETS_PER_TRIGGER`` for a continuous query and no bound for an available-now
run. Spark's ``Trigger.AvailableNow`` honours the limit by running several micro-batches up to the
offsets taken at its start (``KafkaMicroBatchStream`` implements ``SupportsTriggerAvailableNow`` in
Spark 4.1; ``tests/integration/test_backpressure.py`` shows it). An upstream Delta table is read
with Delta's own default bound, ``maxFilesPerTrigger`` 1000 files (Delta docs, "Limit input rate";
``DeltaOptions.MAX_FILES_PER_TRIGGER_OPTION_DEFAULT`` in Delta 4.4), which Kappa leaves as it is.
"""

from __future__ import annotations

import json
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.config import Settings
from kappa.delta.forgotten import forgotten_condition
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.records import KAFKA_COLUMNS

#: How long the broker may hold a fetch that finds no new data (the consumer's ``fetch.max.wait.ms``,
#: Kafka's default 500 ms; Kafka consumer configs). Spark's Kafka source reads offset ranges that
#: already exist, so a hold is pure loss: measured on a new version's replay of 2,000 events (3
#: partitions, ranges ending at the log end), each Kafka task ran ~500 ms longer than its CPU time at
#: the default; at 10 ms the batch's Kafka stage took 0.54 s instead of 1.48 s and the whole
#: available-now run 2.9 s instead of 5.5 s.
FETCH_MAX_WAIT_MS = 10


def kafka_options(settings: Settings) -> dict[str, str]:
    """The options of every Spark read of a Kafka topic (streaming or batch), besides what to read:
    ``kafka.bootstrap.servers``, the client's security properties
    (:meth:`~kappa.config.Settings.kafka_client_options`) and ``kafka.fetch.max.wait.ms``
    (:data:`FETCH_MAX_WAIT_MS`), each with Spark's ``kafka.`` prefix."""
    return {"kafka.bootstrap.servers": settings.bootstrap_servers,
            "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
            **{f"kafka.{k}": v for k, v in settings.kafka_client_options().items()}}


#: ``available_now``: process what the log holds at start, then stop (Spark's
#: ``Trigger.AvailableNow``); ``continuous``: a micro-batch every ``trigger.processing_time``.
TriggerMode = Literal["available_now", "continuous"]


def read_source(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
                mode: TriggerMode) -> DataFrame:
    """The input stream of ``spec`` for a query run in ``mode``: the Kafka topics from their
    earliest offsets, at most :meth:`~kappa.config.Settings.kafka_batch_limit` records per
    micro-batch, or the upstream version's Delta table. Kafka columns: key, value (binary), topic,
    partition, offset, timestamp, timestampType, headers (Spark's Kafka integration guide, "Reading
    Data from Kafka")."""
    if spec.source.kafka is not None:
        src = spec.source.kafka
        created = version.last("created") or {}
        archive = created.get("archive") or {}
        reader = (
            spark.readStream.format("kafka")
            .options(**kafka_options(settings))
            .option("subscribe", ",".join(src.topics))
            # Every version reads the whole retained log (from the log start offsets recorded on it
            # when an archive holds what is below them); a gap in it must fail, not be skipped.
            .option("startingOffsets", json.dumps(created["start_offsets"]) if archive else "earliest")
            .option("failOnDataLoss", "true")
            .option("includeHeaders", "true")
            .option("groupIdPrefix", settings.kafka_group_id_prefix or f"kappa-{spec.name}-v{version.version}-")
        )
        limit = settings.kafka_batch_limit(src.max_offsets_per_trigger, continuous=mode == "continuous")
        if limit is not None:
            reader = reader.option("maxOffsetsPerTrigger", limit)
        records = reader.load()
        if archive:
            records = archived_log(spark, archive).unionByName(records.select(*KAFKA_COLUMNS))
        # Keys forgotten by `kappa forget` never enter a table again (read once per query start).
        forgotten = forgotten_condition(settings, list(src.topics))
        return records if forgotten is None else records.where(~forgotten)
    assert spec.source.asset is not None
    return upstream_stream(spark, version, settings, spec.source.asset)


def archived_log(spark: SparkSession, archive: dict, stream: bool = True) -> DataFrame:
    """The records a version takes from its topics' archives (its ``created`` registry event's
    ``archive``: topic -> ``{"table", "below": {partition: offset}}``, made by
    :func:`kappa.runners.versions.log_sources`): each archive table read as a Delta stream, only the
    topic's offsets below ``below`` of their partition. Columns: :data:`KAFKA_COLUMNS` (the bronze
    table's, the raw bytes and coordinates as the broker held them).

    Read before the log (the query's first source; Kafka, read from ``below``, stays the last, whose
    offsets :func:`kappa.streaming.checkpoint.read_checkpoint` reads) and whole in the first
    micro-batch (no ``maxFilesPerTrigger`` bound), so no record from Kafka is processed in an earlier
    micro-batch than an archived record of its partition. Appends the archive makes later hold
    offsets at or above ``below`` and are filtered out; a forget's DELETE is skipped
    (``skipChangeCommits``: the forgotten keys are filtered from the union anyway). ``stream``
    False: the same records as a batch read of the table as it is now (``kappa forget``'s search)."""
    frames = []
    for topic, entry in sorted(archive.items()):
        below = F.create_map(*[x for p, o in sorted(entry["below"].items()) for x in (F.lit(int(p)), F.lit(int(o)))])
        reader = (spark.readStream.format("delta").option("skipChangeCommits", "true")
                  .option("maxFilesPerTrigger", str(2**31 - 1)) if stream else spark.read.format("delta"))
        frames.append(
            reader.load(str(entry["table"]))
            .where((F.col("topic") == topic) & (F.col("offset") < F.coalesce(below[F.col("partition")], F.lit(0))))
            .select(*KAFKA_COLUMNS))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def upstream_stream(spark: SparkSession, version: Version, settings: Settings, upstream: str) -> DataFrame:
    """The Delta table of the ``upstream`` asset's version pinned by ``version``, as a stream."""
    path = version.upstream_table(upstream)
    # A forget DELETEs rows from the upstream table; a running version keeps its results (the
    # forget replays the promoted aggregates) instead of failing on the non-append commit.
    return spark.readStream.format("delta").option("skipChangeCommits", "true").load(str(path))
