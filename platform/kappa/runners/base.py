"""The runner contract: where an asset version's query runs, and the one catch-up loop above it.

A :class:`Runner` starts a version's query, reports its status, waits until it has caught up with
given end offsets, stops it, and runs the gate where Spark runs. Two implementations:
:class:`kappa.runners.local.LocalRunner` (this process's Spark, ``local[*]``) and
:class:`kappa.runners.kubernetes.runner.KubernetesRunner` (one SparkApplication per version).
:func:`kappa.runners.runner_class` is the only place that looks at ``settings.runner``; everything above (the
CLI, Dagster, ``kappa demo``, :func:`kappa.lifecycle.promotion.replay`) works with any runner, and
asks the runner's class what differs by platform: who runs a command (``identity``, for
``kappa approve``) and whether an asset declared at run time may read its topics
(``refuses_source_topics``). What every runner needs first (the source topics, the version each
asset runs) is :mod:`kappa.runners.versions`.

What a version runs with (its table path, checkpoint path and idempotent-writer id ``txnAppId``) is
the registry's :class:`~kappa.delta.registry.Version`, created once by
:meth:`~kappa.delta.registry.Registry.create_version` and passed to the runner, never re-derived.
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from kappa.errors import KappaError

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.delta.registry import Registry, Version
    from kappa.quality.gate import GateReport
    from kappa.spec import AssetSpec, Catalog
    from kappa.streaming.checkpoint import CatchUpTarget

ProgressCallback = Callable[[str, dict], None]


class Outcome(str, enum.Enum):
    """What a front end (Dagster, the CLI) needs to know about one version's query."""

    PENDING = "pending"  # accepted, not running yet (new, submitted, waiting to re-run, resuming)
    RUNNING = "running"
    RETRYING = "retrying"  # failed; the operator will retry (or give up and report FAILED)
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"  # only for a bounded run (available-now); never for a streaming query
    FAILED = "failed"
    UNKNOWN = "unknown"  # the operator lost track of the driver, or a state Kappa doesn't know

    @property
    def terminal(self) -> bool:
        """Whether the query is over for good (succeeded or failed), so waiting on it is pointless."""
        return self in (Outcome.SUCCEEDED, Outcome.FAILED)


@dataclass(frozen=True)
class RunStatus:
    """What a runner saw of one asset version's query.

    ``outcome`` is None when no query of the version exists; ``state`` is the runner's raw state
    (the operator's ``applicationState.state`` on Kubernetes); ``error`` is empty unless failed;
    ``name`` is the query (local) or SparkApplication name; ``created`` says whether this call
    started it."""

    asset: str
    version: int
    name: str
    namespace: str
    outcome: Outcome | None
    state: str = ""
    error: str = ""
    created: bool = False


@dataclass
class AssetRunResult:
    """What one asset version did in one run until caught up."""

    asset: str
    version: int
    rows: int  # rows in the version's table at the end
    input_rows: int  # records read by this run
    quarantined: int  # rows of this version in the quarantine table
    late_events: int  # rows of this version in the late-events table (behind its watermark)
    dropped_by_watermark: int  # rows Spark's stateful operators dropped as late
    seconds: float
    batches: int
    delta_version: int | None
    end_offsets: dict = field(default_factory=dict)  # topic -> partition -> offset (Kafka sources)
    batch_ms: list[int] = field(default_factory=list)
    input_rows_per_s: float = 0.0
    processed_rows_per_s: float = 0.0
    watermark: str | None = None  # the query's event-time watermark at the end (ISO-8601 UTC)
    state_rows: int = 0  # rows in the stateful operators' state store at the end
    state_bytes: int = 0  # memory used by that state (Spark's memoryUsedBytes)
    #: Of ``dropped_by_watermark``, the rows of the batches whose dropped rows were all named in the
    #: late-events table (:mod:`kappa.streaming.late`); the gate counts the rest as not named.
    dropped_named: int = 0
    #: The batches that dropped rows not named: ``{"batch_id", "dropped", "why"}`` each.
    late_not_named: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict (every field)."""
        return asdict(self)


class RunError(KappaError, RuntimeError):
    """A streaming query failed, or did not start or catch up in time; the message names the asset
    version and the error (Spark's, or the operator's on Kubernetes)."""


def query_error(exc: BaseException | None) -> str:
    """A failed streaming query's error for a console line: Spark's message without the query
    description that ``StreamingQueryException`` appends (``=== Streaming Query ===``, the offsets
    and the logical plan, dozens of lines). The whole of it, with the stack trace, is in the
    process's log file (pyspark logs a failed query there: :mod:`kappa.core.logs`). ``""`` for None."""
    return "" if exc is None else str(exc).split("=== Streaming Query ===", 1)[0].strip()


class Runner(Protocol):
    """Where asset versions run (see the module docstring)."""

    #: ``local`` or ``kubernetes`` (recorded with the version's ``running`` event).
    kind: str
    #: Whether a started query runs outside this process and outlives it (a SparkApplication):
    #: front ends then read its progress from its checkpoint instead of waiting on it here.
    detached: bool

    def start(self, spec: "AssetSpec", version: "Version", *, bounded: bool = False) -> RunStatus:
        """Start the version's query unless it runs already. ``bounded``: read what is available
        now and stop (available-now trigger) where the runner can; a runner that cannot (a
        long-running SparkApplication) starts the processing-time query and catch-up is read from
        the checkpoint. Raises :class:`RunError` if it cannot start."""
        ...

    def status(self, asset: str, version: int) -> RunStatus:
        """The version's query as it is now (``outcome`` None when there is none)."""
        ...

    def wait_until_caught_up(
        self, spec: "AssetSpec", version: "Version", target: "CatchUpTarget", *,
        timeout_s: float | None = None, on_progress: ProgressCallback | None = None,
    ) -> AssetRunResult:
        """Block until the version has read up to ``target`` (:func:`kappa.streaming.checkpoint.remaining`
        is 0 for its checkpoint, or its bounded query ended); return its metrics. Raises
        :class:`RunError` when the query fails or ``timeout_s`` passes."""
        ...

    def stop(self, asset: str, version: int) -> bool:
        """Stop the version's query; False if none ran."""
        ...

    def gate(self, asset: str, version: int, registry: "Registry", catalog: "Catalog | None" = None) -> "GateReport":
        """Run the gate of the version where this runner runs Spark; the report is recorded in the
        registry (``gate_passed`` / ``gate_failed``) and is in ``registry``'s snapshot after.
        ``catalog``: the command's (default: loaded where the gate runs)."""
        ...


def catch_up(
    runner: Runner,
    settings: "Settings",
    catalog: "Catalog",
    names: list[str],
    versions: dict[str, "Version"],
    *,
    registry: "Registry",
    on_progress: ProgressCallback | None = None,
    timeout_s: float | None = None,
) -> list[AssetRunResult]:
    """Run ``names`` (their ``versions``) until each has caught up, upstream levels before
    downstream levels, and record ``running`` then ``caught_up`` (or ``failed``) per version
    through ``registry`` (the command's snapshot).

    Kafka sources catch up to the log end offsets taken here, before anything starts; an asset
    that reads an upstream table catches up to that table's Delta version once the upstream level
    has caught up. Raises :class:`RunError` for a failed query, and what ``runner.start`` raises
    for a version refused before it starts (:class:`kappa.streaming.policy.PolicyError`), recorded
    ``failed`` with its message."""
    from kappa.kafka.topics import log_end_offsets
    from kappa.streaming.checkpoint import CatchUpTarget

    topics = sorted({t for n in names for t in catalog[n].topics})
    ends = log_end_offsets(settings, topics) if topics else {}
    results: list[AssetRunResult] = []
    for level in catalog.levels(names):
        for name in level:
            registry.record(name, versions[name].version, "running", mode=f"{runner.kind}, until caught up")
            try:
                status = runner.start(catalog[name], versions[name], bounded=True)
            except KappaError as exc:  # refused before it started (a declaration the policy refuses)
                registry.record(name, versions[name].version, "failed", error=str(exc)[:2000])
                raise
            if status.outcome is Outcome.FAILED:
                registry.record(name, versions[name].version, "failed", error=status.error[:2000])
                raise RunError(f"{versions[name].name} failed to start ({status.name}): {status.error}")
        for name in level:
            spec, version = catalog[name], versions[name]
            up = spec.source.asset
            up_path = version.upstream_table(up) if up in version.upstream else None
            target = CatchUpTarget(end_offsets={t: ends.get(t, {}) for t in spec.topics},
                                   upstream_version=_table_version(up_path, settings))
            try:
                result = runner.wait_until_caught_up(spec, version, target, timeout_s=timeout_s,
                                                     on_progress=on_progress)
            except RunError as exc:
                registry.record(name, version.version, "failed", error=str(exc)[:2000])
                raise
            metrics = {k: v for k, v in result.to_dict().items() if k not in ("asset", "version")}
            registry.record(name, version.version, "caught_up", **metrics)
            results.append(result)
    return results


def _table_version(path: str | None, settings: "Settings") -> int | None:
    """The latest Delta version of the table at ``path`` (-1 when it has no commit yet), None without one."""
    if path is None:
        return None
    from kappa.delta.tables import open_table

    try:
        return open_table(path, settings).version()
    except Exception:  # no table yet: nothing to read
        return -1


def poll_until(condition: Callable[[], bool], *, timeout_s: float | None, poll_s: float,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Evaluate ``condition`` every ``poll_s`` seconds until it holds (True) or ``timeout_s`` passed (False)."""
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        if condition():
            return True
        if deadline is not None and clock() >= deadline:
            return False
        sleep(poll_s)
