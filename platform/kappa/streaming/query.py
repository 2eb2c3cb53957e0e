"""Building and starting the Structured Streaming query of one asset version.

Exactly-once effects come from the checkpoint plus idempotent sinks (Spark's Structured Streaming
guide, "Fault Tolerance Semantics"; Delta docs, "Idempotent table writes in foreachBatch"). Each
kind builds its own part of the query (:mod:`kappa.streaming.kinds`): its frame and its sink, a
``foreachBatch`` writer derived from :class:`kappa.streaming.writers.MicroBatchWriter`, whose every
Delta write carries the version's transaction id and the batch's provenance. This module adds what
every kind shares: the source stream
(:func:`kappa.streaming.sources.read_source`), the query name, the checkpoint and the trigger.

``KAPPA_FAULT`` (:class:`kappa.faults.Fault`) stops the process at a named point of a micro-batch
of the foreachBatch writers; the fault-point tests use it to prove the above at every gap.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.checkpoint import reopen_cut_off_batch
from kappa.streaming.kinds import kind_of
from kappa.streaming.policy import check_before_running
from kappa.streaming.sources import TriggerMode, read_source


#: Spark's switch for no-data micro-batches. A query reads it from its session when it starts (its
#: ``StreamExecution`` clones the session then), so setting it around ``start()`` sets it per query.
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
#: The scheduler pool of the jobs a thread submits (Spark's "Job Scheduling" guide, "Fair Scheduler
#: Pools"; pools not declared in an allocation file are made on first use, weight 1).
POOL = "spark.scheduler.pool"
_starting = threading.Lock()  # one query's start at a time may change the session's setting
_log = logging.getLogger(__name__)


@dataclass
class RunningQuery:
    """A started query of one asset version (``query``: Spark's handle)."""

    spec: AssetSpec
    version: Version
    query: StreamingQuery


def query_name(asset: str, version: int) -> str:
    """The Structured Streaming query name of ``asset`` version ``version``: ``<asset>_v<N>``."""
    return f"{asset}_v{version}"


def start_query(
    spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings, mode: TriggerMode
) -> RunningQuery:
    """Start the streaming query of one asset version and return it running.

    ``available_now`` processes everything available at start and stops (Spark's
    ``Trigger.AvailableNow``); ``continuous`` runs micro-batches every ``trigger.processing_time``
    until stopped; a continuous query reading Kafka is bounded by ``KAPPA_MAX_OFFSETS_PER_TRIGGER``
    records per micro-batch unless the asset declares its own bound (:mod:`kappa.streaming.sources`).
    The checkpoint is the version's own (never shared between versions). No-data micro-batches run
    only for a kind that emits on the watermark (:attr:`kappa.streaming.kinds.base.Kind.no_data_batches`);
    for such a stateful kind, a no-data micro-batch a stop cut off runs first
    (:func:`kappa.streaming.checkpoint.reopen_cut_off_batch`).

    A declaration recorded at run time is held to the policy again first
    (:func:`kappa.streaming.policy.check_before_running`): one that breaks it raises
    :class:`~kappa.streaming.policy.PolicyError` and nothing starts."""
    check_before_running(spark, spec)
    kind = kind_of(spec)
    if kind.stateful(spec) and kind.no_data_batches(spec):
        reopened = reopen_cut_off_batch(version.checkpoint_path, settings)
        if reopened is not None:
            _log.info("%s: micro-batch %d raised the watermark and the query stopped before the no-data "
                      "micro-batch that emits on it; running batch %d again (its writes are skipped by "
                      "their transaction ids) so that batch follows", version.name, reopened, reopened)
    source = read_source(spark, spec, version, settings, mode)
    writer = kind.start(spark, spec, version, settings, source)
    writer = writer.queryName(query_name(spec.name, version.version)).option(
        "checkpointLocation", version.checkpoint_path
    )
    if mode == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.trigger.processing_time)
    sc = spark.sparkContext
    with _starting:
        before = spark.conf.get(NO_DATA_BATCHES)  # the session's value (Spark's default: true)
        pool = sc.getLocalProperty(POOL)
        spark.conf.set(NO_DATA_BATCHES, str(kind.no_data_batches(spec)).lower())
        # The query's thread inherits the starting thread's local properties: its jobs (its
        # foreachBatch writer's included) run in a FAIR pool of its own, so queries sharing the
        # session share its cores instead of queueing behind each other's jobs (FIFO).
        sc.setLocalProperty(POOL, query_name(spec.name, version.version))
        try:
            query = writer.start()
        finally:
            spark.conf.set(NO_DATA_BATCHES, before)
            sc.setLocalProperty(POOL, pool)
    return RunningQuery(spec=spec, version=version, query=query)
