"""The ``local`` runner: streaming queries in this process's Spark (``local[*]``).

``run_until_caught_up`` runs every asset with an available-now trigger, upstream before downstream,
and records a ``caught_up`` event per version with its metrics. ``run_continuous`` keeps every query
running with its processing-time trigger until ``stop`` is set (the CLI sets it on SIGINT/SIGTERM).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from kappa.config import Settings
from kappa.core.storage import exists, join
from kappa.delta.archive import archived_records
from kappa.delta.registry import Registry, Version, late_events_path, quarantine_path
from kappa.runners.base import (
    AssetRunResult,
    Outcome,
    ProgressCallback,
    RunError,
    RunStatus,
    poll_until,
    query_error,
)
from kappa.spec import Catalog
from kappa.delta.declarations import as_recorded, catalog as catalog_of
from kappa.runners.versions import ensure_source_topics, resolve_versions
from kappa.streaming.checkpoint import checkpoint_watermark
from kappa.streaming.kinds import kind_of
from kappa.streaming.late import LateTally, dropped_by_batch, name_dropped_rows
from kappa.streaming.late import summary as late_summary


_log = logging.getLogger(__name__)

#: Spark's error when a Python process it started on the driver did not connect back in time. A
#: ``transformWithState`` query in Python (the ``sliding`` and ``pattern`` kinds) starts one when
#: its first micro-batch is planned (``StreamingPythonRunner``, through
#: ``PythonWorkerFactory.createSimpleWorker``), which waits a fixed 10 s (``Selector.select(10000)``
#: in Spark 4.1.3; no Spark setting changes it). The interpreter imports PySpark from
#: ``pyspark.zip`` (no cached bytecode), ~2.5 s on this 2-core machine under load 19; under load 35+
#: it missed the 10 s. The query fails before it writes anything, so restarting it from its
#: checkpoint is safe (exactly what a restart after a crash does).
PYTHON_CONNECT_BACK = "Python worker failed to connect back"
#: How many times a bounded run restarts a query that failed with :data:`PYTHON_CONNECT_BACK`.
CONNECT_BACK_RESTARTS = 2


def restartable(error: str) -> bool:
    """True when a failed query's error is Spark's Python connect-back timeout
    (:data:`PYTHON_CONNECT_BACK`): the one failure :meth:`LocalRunner.wait_until_caught_up`
    restarts. Any other failure is the asset's or the data's and is raised."""
    return PYTHON_CONNECT_BACK in error


def progress_as_dict(progress) -> dict:
    """A StreamingQueryProgress as plain JSON data (PySpark 4 returns typed objects)."""
    text = getattr(progress, "json", None)
    return json.loads(text) if isinstance(text, str) else dict(progress)


def kafka_offsets(progress: list[dict], which: str = "endOffset") -> dict[str, dict[str, int]]:
    """topic -> partition -> offset from Kafka-source progress reports (the last report wins);
    ``which`` is ``startOffset`` or ``endOffset``. Non-Kafka sources are skipped."""
    out: dict[str, dict[str, int]] = {}
    for p in progress:
        for src in p.get("sources", []):
            if not str(src.get("description", "")).startswith("Kafka"):
                continue
            value = src.get(which)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    continue
            if isinstance(value, dict):
                for topic, parts in value.items():
                    out.setdefault(topic, {}).update({str(k): int(v) for k, v in parts.items()})
    return out


def records_read(progress: list[dict], log_start: dict[str, dict[str, int]] | None = None) -> int:
    """Records a query consumed: from Kafka offsets (end - start of each batch) where the source is
    Kafka, since Spark's numInputRows counts the source once per action and a foreachBatch body
    that writes twice doubles it; numInputRows otherwise.

    A query's first batch reports no start offset: it started at ``log_start`` (topic -> partition
    -> offset, the version's recorded ``start_offsets``), or at 0 when that is not given. On a
    compacted topic offsets have gaps, so the count is an upper bound there."""
    total = 0
    for p in progress:
        kafka = [s for s in p.get("sources", []) if str(s.get("description", "")).startswith("Kafka")]
        if not kafka:
            total += int(p.get("numInputRows", 0))
            continue
        for src in kafka:
            start, end = (kafka_offsets([{"sources": [src]}], w) for w in ("startOffset", "endOffset"))
            if not start:
                start = log_start or {}
            for topic, parts in end.items():
                for part, off in parts.items():
                    total += off - int(start.get(topic, {}).get(part, 0))
    return total


def _collect(spark, settings: Settings, running, seconds: float) -> AssetRunResult:
    from delta.tables import DeltaTable

    q, spec, version = running.query, running.spec, running.version
    progress = [progress_as_dict(p) for p in q.recentProgress if p]
    created = version.last("created") or {}
    input_rows = records_read(progress, created.get("start_offsets"))
    if any(p.get("batchId") == 0 for p in progress):  # batch 0 read the archives below the log start
        input_rows += archived_records(created)
    dropped = sum(
        op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", [])
    )
    end_offsets = kafka_offsets(progress)
    named = late_summary(name_dropped_rows(spark, settings, spec, version, dropped_by_batch(progress)))
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    batch_ms = [int(p.get("durationMs", {}).get("triggerExecution", 0)) for p in batches]
    table = DeltaTable.forPath(spark, version.table_path)
    rows = table.toDF().count()
    delta_version = table.history(1).select("version").first()[0]
    quarantined = late = 0
    mine = f"asset = '{spec.name}' AND version = {version.version}"
    kind = kind_of(spec)
    if kind.quarantines:
        quarantined = spark.read.format("delta").load(str(quarantine_path(settings))).where(mine).count()
    if kind.keeps_late_rows and exists(join(late_events_path(settings), "_delta_log"), settings):
        late = spark.read.format("delta").load(str(late_events_path(settings))).where(mine).count()
    return AssetRunResult(
        asset=spec.name, version=version.version, rows=rows, input_rows=input_rows, quarantined=quarantined,
        late_events=late,
        dropped_by_watermark=dropped, seconds=round(seconds, 2), batches=len(batches),
        delta_version=delta_version, end_offsets=end_offsets, batch_ms=batch_ms,
        input_rows_per_s=round(input_rows / seconds, 1) if seconds > 0 else 0.0, **named,
        processed_rows_per_s=round(input_rows / (sum(batch_ms) / 1000), 1) if sum(batch_ms) else 0.0,
        # A run that found nothing to read ran no batch: the watermark is the last committed batch's.
        watermark=((progress[-1] if progress else {}).get("eventTime") or {}).get("watermark")
        or (checkpoint_watermark(version.checkpoint_path, settings) if spec.watermark is not None else None),
        state_rows=sum(int(op.get("numRowsTotal", 0)) for op in (progress[-1] if progress else {}).get("stateOperators", [])),
        state_bytes=sum(int(op.get("memoryUsedBytes", 0)) for op in (progress[-1] if progress else {}).get("stateOperators", [])),
    )


class LocalRunner:
    """The ``local`` runner (:class:`kappa.runners.base.Runner`): queries in this process's Spark.

    ``start(bounded=True)`` starts an available-now query (it reads what is in the log now and
    stops); ``start(bounded=False)`` a query with the asset's processing-time trigger, whose catch-up
    is read from its checkpoint like the kubernetes runner's. ``spark``: the session (default:
    :func:`kappa.streaming.session.spark_session`, created on first use)."""

    kind = "local"
    #: Queries live in this process.
    detached = False

    def __init__(self, settings: Settings, *, spark=None, poll_s: float = 1.0, **_ignored):
        self.settings, self._spark, self.poll_s = settings, spark, poll_s
        self._running: dict[tuple[str, int], tuple[object, bool, float]] = {}

    @classmethod
    def from_settings(cls, settings: Settings, **options) -> "LocalRunner":
        """The runner for ``settings`` (``options``: ``spark``, ``poll_s``)."""
        return cls(settings, **options)

    @staticmethod
    def identity(api_client=None) -> dict:
        """Who runs this command: ``{"user", "uid", "source"}`` of this process's effective uid
        (``api_client`` is not used here)."""
        import os
        import pwd

        uid = os.geteuid()
        return {"user": pwd.getpwuid(uid).pw_name, "uid": uid, "source": "local user (effective uid)"}

    @staticmethod
    def refuses_source_topics(spec) -> str | None:
        """Why an asset declared at run time may not read its Kafka topics here: never (None); a
        local query reads the broker as this process."""
        return None

    @property
    def spark(self):
        """The runner's Spark session, created on first use (:func:`kappa.streaming.session.spark_session`)."""
        if self._spark is None:
            from kappa.streaming.session import spark_session

            self._spark = spark_session(self.settings)
        return self._spark

    def start(self, spec, version: Version, *, bounded: bool = False) -> RunStatus:
        """Start the version's query in this process (see :meth:`kappa.runners.base.Runner.start`)."""
        from kappa.streaming.query import start_query

        key = (spec.name, version.version)
        if key in self._running and self._running[key][0].query.isActive:
            return self.status(*key)
        running = start_query(self.spark, spec, version, self.settings, "available_now" if bounded else "continuous")
        self._running[key] = (running, bounded, time.monotonic())
        return RunStatus(asset=spec.name, version=version.version, name=running.query.name or version.name,
                         namespace="local", outcome=Outcome.RUNNING, state="ACTIVE", created=True)

    def status(self, asset: str, version: int) -> RunStatus:
        """The version's query in this process (see :meth:`kappa.runners.base.Runner.status`)."""
        found = self._running.get((asset, version))
        if found is None:
            return RunStatus(asset=asset, version=version, name=f"{asset}/v{version}", namespace="local", outcome=None)
        q = found[0].query
        exc = None if q.isActive else q.exception()
        outcome = Outcome.RUNNING if q.isActive else Outcome.FAILED if exc is not None else Outcome.SUCCEEDED
        return RunStatus(asset=asset, version=version, name=q.name or f"{asset}/v{version}", namespace="local",
                         outcome=outcome, state="ACTIVE" if q.isActive else "TERMINATED", error=query_error(exc))

    def wait_until_caught_up(self, spec, version: Version, target, *, timeout_s: float | None = None,
                             on_progress: ProgressCallback | None = None) -> AssetRunResult:
        """A bounded (available-now) query: until it ends. A processing-time query: until its
        checkpoint reached ``target``. Raises :class:`RunError` when the query failed or was not
        started, or ``timeout_s`` passed."""
        from kappa.streaming.checkpoint import read_checkpoint, remaining

        key = (spec.name, version.version)
        found = self._running.get(key)
        if found is None:
            raise RunError(f"{version.name} was not started by this runner")
        running, bounded, started = found
        start_offsets = (version.last("created") or {}).get("start_offsets") or {}
        archived = archived_records(version.last("created"))

        def done() -> bool:
            q = running.query
            if on_progress is not None and q.lastProgress:
                on_progress(spec.name, progress_as_dict(q.lastProgress))
            if not q.isActive:
                return True
            return not bounded and remaining(read_checkpoint(version.checkpoint_path, self.settings),
                                             target, start_offsets, archived) == 0

        def wait(seconds: float) -> None:
            # Between looks: the query's end wakes the wait at once (a bounded query is done then).
            try:
                running.query.awaitTermination(seconds)
            except Exception:  # it failed: done() sees it and the loop below names the error
                pass

        for attempt in range(CONNECT_BACK_RESTARTS + 1):
            finished = poll_until(done, timeout_s=timeout_s, poll_s=self.poll_s, sleep=wait)
            q = running.query
            exc = None if q.isActive else q.exception()
            if exc is None or not restartable(str(exc)) or attempt == CONNECT_BACK_RESTARTS:
                break
            _log.warning("%s: %s (Spark waits 10 s for it); restarting the query from its checkpoint (%d/%d)",
                         version.name, PYTHON_CONNECT_BACK, attempt + 1, CONNECT_BACK_RESTARTS)
            self._running.pop(key, None)
            self.start(spec, version, bounded=bounded)
            running = self._running[key][0]
            self._running[key] = (running, bounded, started)
        if exc is not None:
            raise RunError(f"{version.name} failed: {query_error(exc)}")
        if not finished:
            raise RunError(f"{version.name} did not catch up within {timeout_s:.0f} s")
        return _collect(self.spark, self.settings, running, time.monotonic() - started)

    def stop(self, asset: str, version: int) -> bool:
        """Stop the version's query between micro-batches; False if none runs here."""
        found = self._running.pop((asset, version), None)
        if found is None:
            return False
        stop_between_batches([found[0].query])
        return True

    def gate(self, asset: str, version: int, registry: Registry, catalog: Catalog | None = None):
        """Run the version's gate in this process's Spark (:func:`kappa.quality.gate.run_gate`),
        recorded through ``registry``, with the command's ``catalog``."""
        from kappa.quality.gate import run_gate

        return run_gate(self.settings, asset, version, spark=self.spark, registry=registry, catalog=catalog)


def run_continuous(
    settings: Settings,
    names: list[str] | None = None,
    *,
    stop: threading.Event,
    spark=None,
    on_progress: Callable[[str, dict], None] | None = None,
    poll_s: float = 2.0,
    grace_s: float = 60.0,
    on_poll: Callable[[], None] | None = None,
    registry: Registry | None = None,
) -> list[str]:
    """Start ``names`` (default: every asset) with their processing-time triggers and keep them
    running until ``stop`` is set; then stop every query between micro-batches (waiting up to
    ``grace_s`` seconds for the batch in flight to commit). Returns the query names.
    ``on_poll()`` is called every ``poll_s`` seconds while they run (``kappa run --continuous``
    advances the cut from it). Events are recorded through ``registry``, the command's snapshot
    (default: a new one, ``kappa run --continuous``'s). Raises :class:`RunError` as soon as one
    query fails (the others are stopped first)."""
    from kappa.streaming.query import start_query
    from kappa.streaming.session import spark_session

    catalog = catalog_of(settings)
    names = catalog.topological(names or list(catalog.assets))
    ensure_source_topics(settings, catalog, names)
    registry = registry or Registry(settings)
    chosen = resolve_versions(catalog, names, registry)
    catalog = as_recorded(settings, catalog, chosen)  # each version runs the declaration it recorded
    spark = spark or spark_session(settings)
    running = []
    tallies: dict[str, LateTally] = {}  # asset -> its drops and named late rows (kappa.streaming.late)

    def tally() -> None:
        # recentProgress keeps only the newest reports: fold them in at every poll; the late rows
        # of each new batch with drops are named while the queries run.
        for r in running:
            tallies[r.spec.name].fold([progress_as_dict(x) for x in r.query.recentProgress if x])

    try:
        for name in names:
            registry.record(name, chosen[name].version, "running", mode="continuous")
            tallies[name] = LateTally(spark, settings, catalog[name], chosen[name])
            running.append(start_query(spark, catalog[name], chosen[name], settings, "continuous"))
        while not stop.is_set():
            stop.wait(poll_s)
            tally()
            for r in running:
                if not r.query.isActive:
                    exc = r.query.exception()
                    registry.record(r.spec.name, r.version.version, "failed", error=query_error(exc)[:2000])
                    raise RunError(f"{r.version.name} stopped: {query_error(exc)}")
                if on_progress is not None and r.query.lastProgress:
                    on_progress(r.spec.name, progress_as_dict(r.query.lastProgress))
            if on_poll is not None:
                on_poll()
    finally:
        stop_between_batches([r.query for r in running], grace_s=grace_s)
        tally()
        for r in running:  # what the gate's late_rows check reads for a continuously run version
            registry.record(r.spec.name, r.version.version, "stopped", mode="continuous",
                            **tallies[r.spec.name].totals())
    return [r.query.name for r in running]


def stop_between_batches(queries, grace_s: float = 60.0) -> None:
    """Stop each query when it has no micro-batch in flight (or after ``grace_s`` seconds), so the
    table and the checkpoint's commit log end in step. Stopping mid-batch would be safe too (the
    batch reruns idempotently from the checkpoint), only less tidy."""
    deadline = time.monotonic() + grace_s
    for q in queries:
        while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            q.stop()
        except Exception:  # stopping must reach every query
            pass
