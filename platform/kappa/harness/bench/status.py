"""What a bench query's micro-batches did, from Spark's progress reports and status store: the
phases of each batch (:func:`batch_breakdown`), its Spark jobs, Delta commits and files read, and
the writer steps inside ``addBatch`` (:func:`step_breakdown`), per batch (:func:`per_batch`)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from kappa.config import Settings


def query_progress(q) -> list[dict]:
    """The progress reports Spark keeps of query ``q`` (its last 100), as dicts."""
    from kappa.runners.local import progress_as_dict

    return [progress_as_dict(p) for p in q.recentProgress]


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


def job_step(description: str | None) -> str | None:
    """The writer step (:meth:`kappa.streaming.writers.MicroBatchWriter.step`) a Spark job's description names, with what
    Delta appended to it (``append table: Compute snapshot for version: N``: Delta describes its own
    jobs after the caller's description; numbers become ``N``, so every batch's jobs group alike);
    None when the job ran outside any step."""
    from kappa.streaming.writers import STEP_MARK

    if not description or STEP_MARK not in description:
        return None
    return re.sub(r"\d+", "N", description.split(STEP_MARK, 1)[1])


def stage_rows(spark, jobs: set[int] | None) -> list[dict] | None:
    """One row per stage that ran for the Spark jobs ``jobs`` (a query's, :func:`spark_jobs`), from
    Spark's status store (its listener runs with the UI off too): ``job``, ``job_wall_ms`` (the
    job's submission to completion), ``step`` (the writer step the job's description names,
    :func:`job_step`; None outside any step), ``stage``, ``tasks``,
    ``wall_ms`` (the stage's submission to completion), ``run_ms`` (its tasks' summed
    ``executorRunTime``), ``cpu_ms`` (their ``executorCpuTime``), ``gc_ms`` (``jvmGcTime``),
    ``input_records`` and ``shuffle_write_bytes``. Stages Spark skipped (their
    shuffle output reused) are left out. A stage the store no longer holds (it keeps
    ``spark.ui.retainedStages``, and evicts the stages without a completion time, the skipped ones,
    first) is a row with ``missing`` true and no figures: its job's wall time still counts. None
    ("not evaluated") when ``jobs`` is None or the store no longer holds one of them (it keeps the
    last ``spark.ui.retainedJobs``)."""
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
    window = [p for p in query_progress(query) if batch_before < p.get("batchId", -1) <= batch_after]
    counted = new_jobs(jobs_before, jobs_after, retained_jobs(spark))
    known = None if counted is None else jobs_after - jobs_before
    batches = batch_after - batch_before
    whole = len(window) == batches
    return per_batch(counted, commits, batches, batch_breakdown(window), files_read(spark, known),
                     step_breakdown(stage_rows(spark, known), batches,
                                    add_batch_sum({}, all_batches=window) if whole else None))
