"""What a streaming query's checkpoint says about it, read from outside the query's process.

The Dagster sensor runs in the daemon, not in the process that runs the query, so it cannot ask
Spark for ``lastProgress``. It reads what Structured Streaming persists instead (Spark's
"Structured Streaming Programming Guide", *Recovering from Failures with Checkpointing*):

* ``<checkpoint>/offsets/<batchId>``: the write-ahead log. Written when batch ``batchId`` is planned:
  a ``v1`` line, a metadata line, then one JSON line per source with the offsets the batch reads up
  to (Kafka: ``{"topic": {"partition": offset}}``; Delta: ``{"reservoirVersion": n, "index": i, ...}``).
* ``<checkpoint>/commits/<batchId>``: written when batch ``batchId`` has been committed to the sink.

The *committed offset* is therefore the offsets file of the newest committed batch, and the
consumer lag of a partition is ``log end offset - committed offset`` (Kafka's definition of lag,
with the checkpoint in the role of the consumer group). No commit yet means nothing is consumed:
the lag is the whole retained log.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry, Version
from kappa.kafka.topics import TopicError
from kappa.spec import AssetSpec, Catalog
from kappa.core.storage import delete_file, join, list_names, mtime, read_text


@dataclass
class CheckpointState:
    """The newest committed batch of a checkpoint (all None/empty when nothing is committed)."""

    batch_id: int | None = None
    #: The source offsets the committed batch read up to (last source line of its offsets file).
    offsets: dict = field(default_factory=dict)
    #: Unix time (s) of the newest commit file, i.e. the last time the query made progress.
    committed_at: float | None = None
    #: Newest planned batch (may be ahead of ``batch_id`` while a batch runs).
    planned_batch_id: int | None = None


def records_read_through(state: CheckpointState, created: dict | None) -> int:
    """Records a version has read from the log through ``state`` (its checkpoint's newest committed
    batch, :func:`read_checkpoint`): the Kafka offsets minus the log start offsets its ``created``
    event recorded (``start_offsets``; 0 where none), summed over topics and partitions, plus the
    records it took from archives below them, all read by its first micro-batch
    (:func:`kappa.delta.archive.archived_records`). 0 when nothing is committed."""
    from kappa.delta.archive import archived_records

    created = created or {}
    starts = created.get("start_offsets") or {}
    read = archived_records(created) if state.batch_id is not None else 0
    for topic, parts in state.offsets.items():
        if isinstance(parts, dict):  # a Kafka source (topic -> partition -> offset)
            read += sum(int(off) - int((starts.get(topic) or {}).get(str(p), 0)) for p, off in parts.items())
    return read


def _batch_files(folder: str, settings: Settings | None) -> dict[int, str]:
    return {int(n): join(folder, n) for n in list_names(folder, settings) if n.isdigit()}


def read_checkpoint(checkpoint: str | Path, settings: Settings | None = None) -> CheckpointState:
    """Parse ``<checkpoint>/offsets`` and ``<checkpoint>/commits`` on any filesystem
    (:mod:`kappa.core.storage`: a local path, ``file://`` or ``s3a://``; ``settings`` gives the object
    store's endpoint). Never raises for a missing or half-written checkpoint (a query that has not
    committed yet is a normal state)."""
    root = str(checkpoint)
    offsets = _batch_files(join(root, "offsets"), settings)
    commits = _batch_files(join(root, "commits"), settings)
    state = CheckpointState(planned_batch_id=max(offsets) if offsets else None)
    done = sorted(b for b in commits if b in offsets)
    if not done:
        return state
    batch = done[-1]
    lines = [ln for ln in read_text(offsets[batch], settings).splitlines() if ln.strip()]
    try:
        source = json.loads(lines[-1]) if len(lines) >= 3 else {}
    except ValueError:
        source = {}
    state.batch_id = batch
    state.offsets = source if isinstance(source, dict) else {}
    state.committed_at = mtime(commits[batch], settings)
    return state


def query_id(checkpoint: str | Path, settings: Settings | None = None) -> str | None:
    """The streaming query id a checkpoint belongs to (``<checkpoint>/metadata``: ``{"id": ...}``,
    written when the query first starts and kept across restarts; Delta's own streaming sink used it
    as its ``txn`` app id), None when there is no such file yet."""
    try:
        meta = json.loads(read_text(join(str(checkpoint), "metadata"), settings).splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    return meta.get("id") if isinstance(meta, dict) else None


def batch_watermark_ms(checkpoint: str | Path, batch_id: int, settings: Settings | None = None) -> int | None:
    """The event-time watermark (epoch ms) Spark planned micro-batch ``batch_id`` with: the
    ``batchWatermarkMs`` of its write-ahead log entry's metadata line, ``<checkpoint>/offsets/<batch_id>``
    (written before the batch runs; 0 until a batch with event times has completed). The stateful
    operators of batch N evict state with it and drop input rows at or behind the one of batch
    N - 1 (Spark 4.1 ``PropagateWatermarkSimulator.getInputWatermarkForLateEvents``). None when the
    entry is missing or unreadable."""
    return _metadata_ms(checkpoint, "offsets", batch_id, "batchWatermarkMs", settings)


def _metadata_ms(checkpoint: str | Path, log: str, batch_id: int, key: str, settings: Settings | None) -> int | None:
    """``key`` (epoch ms; 0 when absent) of the metadata line (the second) of ``<checkpoint>/<log>/<batch_id>``,
    None when that file is missing or unreadable."""
    path = join(join(str(checkpoint), log), str(batch_id))
    try:
        lines = [ln for ln in read_text(path, settings).splitlines() if ln.strip()]
        return int(json.loads(lines[1]).get(key, 0))
    except (OSError, FileNotFoundError, ValueError, IndexError, AttributeError):
        return None


def checkpoint_watermark(checkpoint: str | Path, settings: Settings | None = None) -> str | None:
    """The event-time watermark of the checkpoint's last committed micro-batch, as Spark's progress
    reports a batch's (``eventTime.watermark``: ISO-8601 UTC with milliseconds, ``…T02:59:00.000Z``),
    from its write-ahead log entry (:func:`batch_watermark_ms`); None with no committed batch. For
    a run that found nothing new to read (no batch, so no progress to read it from)."""
    from datetime import datetime, timezone

    batch = read_checkpoint(checkpoint, settings).batch_id
    ms = None if batch is None else batch_watermark_ms(checkpoint, batch, settings)
    if ms is None:
        return None
    at = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def next_batch_watermark_ms(checkpoint: str | Path, batch_id: int, settings: Settings | None = None) -> int | None:
    """The event-time watermark (epoch ms) committed micro-batch ``batch_id`` raised the query's to:
    the ``nextBatchWatermarkMs`` of ``<checkpoint>/commits/<batch_id>`` (Spark's ``CommitMetadata``:
    the watermark the next micro-batch is planned with). None when the commit is missing or unreadable."""
    return _metadata_ms(checkpoint, "commits", batch_id, "nextBatchWatermarkMs", settings)


def reopen_cut_off_batch(checkpoint: str | Path, settings: Settings | None = None) -> int | None:
    """Make a restart run the no-data micro-batch a stop cut off; returns the batch re-opened, or None.

    A micro-batch that raises the watermark is followed by a no-data micro-batch planned with the
    new watermark, which emits what it closes (append-mode windows and sessions, an outer join's
    unmatched rows). Spark decides to run that batch from the last batch's executed plan, which a
    restarted query does not have (``MicroBatchExecution.constructNextBatch``:
    ``lastExecutionRequiresAnotherBatch`` reads the previous execution): if the query stopped
    between the two, a restart with nothing new to read runs no batch, and what the watermark
    closed stays in the state store until more input comes. A replay of the same log, run without
    the stop, emits it: the two versions differ.

    The checkpoint says it: the newest batch is committed (``commits/<N>``) and its commit's
    ``nextBatchWatermarkMs`` is above the ``batchWatermarkMs`` it was planned with
    (``offsets/<N>``). Then ``commits/<N>`` (and its checksum file) is deleted: the checkpoint is
    as after a crash just before that commit, which Spark recovers from by running batch N again
    from its write-ahead log entry and state. Its writes are skipped by their transaction ids
    (:class:`kappa.streaming.writers.MicroBatchWriter`), and having run it, Spark plans the no-data
    batch. Nothing is done when the newest planned batch is not committed (Spark re-runs it
    anyway) or the watermark did not move."""
    offsets = _batch_files(join(str(checkpoint), "offsets"), settings)
    commits = _batch_files(join(str(checkpoint), "commits"), settings)
    if not offsets or max(offsets) not in commits:
        return None
    batch = max(offsets)
    planned, raised = batch_watermark_ms(checkpoint, batch, settings), next_batch_watermark_ms(checkpoint, batch, settings)
    if planned is None or raised is None or raised <= planned:
        return None
    delete_file(join(join(str(checkpoint), "commits"), f".{batch}.crc"), settings)
    delete_file(commits[batch], settings)
    return batch


def batch_sources(checkpoint: str | Path, batch_id: int, settings: Settings | None = None) -> list[dict]:
    """What micro-batch ``batch_id`` reads up to, one entry per source in the query's source order,
    from its write-ahead log entry ``<checkpoint>/offsets/<batch_id>`` (written before the batch
    runs): Kafka ``{"topic": {"partition": offset}}`` (the end offsets, exclusive), Delta
    ``{"reservoirId": …, "reservoirVersion": n, "index": i, …}``. ``[]`` when the entry is missing
    (not yet planned, or purged: Spark keeps ``spark.sql.streaming.minBatchesToRetain``, 100)."""
    path = join(join(str(checkpoint), "offsets"), str(batch_id))
    try:
        lines = [ln for ln in read_text(path, settings).splitlines() if ln.strip()]
    except (OSError, FileNotFoundError):
        return []
    out = []
    for line in lines[2:]:  # "v1", the batch metadata, then one line per source
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({})
    return out


@dataclass
class QueryHealth:
    """One observation of one asset's current version."""

    asset: str
    version: int
    state: str  # the registry state: running, caught-up, failed, failed-gate, promoted, retired
    healthy: bool
    reason: str
    #: Kafka sources: topic -> partition -> records not yet committed by the query.
    lag: dict[str, dict[str, int]] = field(default_factory=dict)
    committed: dict = field(default_factory=dict)
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Delta sources: upstream table versions not yet read.
    upstream_versions_behind: int | None = None
    last_progress_at: float | None = None
    committed_batch: int | None = None
    #: ``ERROR`` or ``WARN``: how a failed ``query_health`` shows (a not-yet-running application warns).
    severity: str = "ERROR"
    #: The kubernetes runner: the version's SparkApplication and its operator state.
    application: str | None = None
    application_state: str | None = None

    @property
    def total_lag(self) -> int:
        """Kafka records not yet committed, summed over every topic and partition of :attr:`lag`
        (0 for a Delta-sourced asset: see :attr:`upstream_versions_behind`)."""
        return sum(v for parts in self.lag.values() for v in parts.values())

    @property
    def seconds_since_progress(self) -> float | None:
        """Seconds (wall clock, never negative) since :attr:`last_progress_at`: the newest commit of
        the checkpoint, or the version's last ``running`` event if later (a query just started has
        not stalled). None when neither is known."""
        return None if self.last_progress_at is None else max(0.0, time.time() - self.last_progress_at)


def _kafka_lag(settings: Settings, spec: AssetSpec, committed: dict) -> tuple[dict, dict]:
    from kappa.kafka.topics import offsets

    lag: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for po in offsets(settings, spec.topics, timeout_s=5):
        done = committed.get(po.topic, {}).get(str(po.partition))
        # Nothing committed for this partition yet: everything retained is still to be read.
        consumed = po.start if done is None else int(done)
        ends.setdefault(po.topic, {})[str(po.partition)] = po.end
        lag.setdefault(po.topic, {})[str(po.partition)] = max(0, po.end - consumed)
    return lag, ends


def read_through(committed: dict) -> int | None:
    """The last upstream Delta version a Delta-source checkpoint offset has fully read, or None when
    nothing is committed. Delta's source offset ``(reservoirVersion, index=-1)`` means "everything
    before reservoirVersion is read" (delta-io ``DeltaSourceOffset``)."""
    if "reservoirVersion" not in committed:
        return None
    return int(committed["reservoirVersion"]) - (1 if committed.get("index", -1) == -1 else 0)


def _delta_behind(registry: Registry, version: Version, spec: AssetSpec, committed: dict) -> int | None:
    """Upstream Delta versions not yet read."""
    from kappa.delta.tables import open_table

    up = spec.source.asset
    if up is None or up not in version.upstream:
        return None
    try:
        latest = open_table(version.upstream_table(up), registry.settings).version()
    except Exception:  # upstream table not written yet
        return None
    done = read_through(committed)
    return latest + 1 if done is None else max(0, latest - done)


@dataclass(frozen=True)
class CatchUpTarget:
    """Where a version counts as caught up.

    ``end_offsets``: Kafka sources, topic -> partition -> log end offset taken when the run (or the
    replay) started; ``upstream_version``: an upstream-table source, the upstream Delta table
    version to have read (its version when the upstream caught up; -1: the upstream table is empty)."""

    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    upstream_version: int | None = None


def remaining(state: CheckpointState, target: CatchUpTarget, start_offsets: dict | None = None,
              archived: int = 0) -> int:
    """What a checkpoint still has to read to reach ``target``: Kafka records (log end offset minus
    committed offset, summed over partitions; a partition with nothing committed counts from the
    version's ``start_offsets``) plus upstream Delta versions, plus, until its first micro-batch
    commits, the ``archived`` records it reads from archives below the start offsets
    (:func:`kappa.delta.archive.archived_records`). 0 means caught up."""
    left = archived if state.batch_id is None else 0
    for topic, parts in target.end_offsets.items():
        for part, end in parts.items():
            done = state.offsets.get(topic, {}).get(str(part)) if isinstance(state.offsets.get(topic), dict) else None
            consumed = int(done) if done is not None else int((start_offsets or {}).get(topic, {}).get(str(part), 0))
            left += max(0, int(end) - consumed)
    if target.upstream_version is not None and target.upstream_version >= 0:
        done = read_through(state.offsets)
        left += target.upstream_version + 1 if done is None else max(0, target.upstream_version - done)
    return left


def observe(
    settings: Settings, catalog: Catalog, stall_after_s: float, names: list[str] | None = None,
    registry: Registry | None = None,
) -> list[QueryHealth]:
    """Observe the latest (non-retired) version of every asset in ``names`` (default: all) that
    has one (in ``registry``, the command's snapshot; default: a new one).

    Unhealthy means: the version's last run failed, or it is marked running, has records to read,
    and has committed nothing for ``stall_after_s`` seconds (a stalled or dead query). A version
    that is not running and lags is healthy but lagging (it runs when materialized).
    A broker that does not answer, or a missing topic, makes the Kafka-sourced assets unhealthy
    (their lag is unknown); nothing is raised, so one bad asset cannot hide the others.
    """
    registry = registry or Registry(settings)
    out: list[QueryHealth] = []
    broker_down: str | None = None
    for name in catalog.topological(names):
        spec = catalog[name]
        version = registry.latest(name)
        if version is None:
            continue
        cp = read_checkpoint(version.checkpoint_path, settings)
        health = QueryHealth(asset=name, version=version.version, state=version.state, healthy=True,
                             reason="", committed=cp.offsets, committed_batch=cp.batch_id)
        lag_error = None
        if spec.topics and broker_down is not None:
            lag_error = broker_down
        elif spec.topics:
            try:
                health.lag, health.end_offsets = _kafka_lag(settings, spec, cp.offsets)
            except Exception as exc:  # TopicError, KafkaException: both mean "lag unknown"
                lag_error = f"cannot read the log end offsets of {spec.topics} at {settings.bootstrap_servers}: {exc}"
                if not isinstance(exc, TopicError):
                    # The broker does not answer: don't wait for its timeout once per asset.
                    broker_down = lag_error
        else:
            health.upstream_versions_behind = _delta_behind(registry, version, spec, cp.offsets)
        running = version.last("running")
        started_at = next((e["at"].timestamp() for e in reversed(version.events) if e["event"] == "running"), None)
        health.last_progress_at = max(filter(None, [cp.committed_at, started_at]), default=None)
        pending = health.total_lag > 0 or (health.upstream_versions_behind or 0) > 0
        idle_s = health.seconds_since_progress
        if lag_error is not None:
            health.healthy = False
            health.reason = f"{version.name}: {lag_error}"
        elif version.state == "failed":
            failed = version.last("failed") or {}
            health.healthy = False
            health.reason = f"{version.name} failed: {str(failed.get('error', 'unknown error'))[:500]}"
        elif version.state == "running" and pending and idle_s is not None and idle_s > stall_after_s:
            health.healthy = False
            health.reason = (f"{version.name} is marked running ({(running or {}).get('mode', '?')}) with "
                             f"{health.total_lag or health.upstream_versions_behind} pending but committed "
                             f"nothing for {idle_s:.0f} s (stall threshold {stall_after_s:.0f} s)")
        elif version.state == "running":
            health.reason = f"{version.name} is running; lag {health.total_lag}"
        else:
            health.reason = f"{version.name} is {version.state} (not running); lag {health.total_lag}"
        out.append(health)
    return out
