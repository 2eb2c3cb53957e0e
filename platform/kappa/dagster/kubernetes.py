"""Dagster on the ``kubernetes`` runner (``KAPPA_RUNNER=kubernetes``).

Each asset version runs as a long-running SparkApplication (:mod:`kappa.runners.kubernetes`);
Dagster creates it, reads its state through the Kubernetes API and stops it. What Dagster does with
the operator's state is one pure mapping, :func:`decide` (materialization) and :func:`health_of`
(the ``query_health`` check), so every state is tested without a cluster:

=================  ====================================================  ==========================
Outcome            materialize                                           query_health
=================  ====================================================  ==========================
RUNNING            MaterializeResult (version, application, state)       passed
SUCCEEDED          MaterializeResult (a bounded run only; a streaming    passed
                   app reported COMPLETED is FAILED, see ``outcome_of``)
PENDING            no materialization, a warning and an observation:     failed, WARN (not running
                   the application exists but is not running yet          yet)
SUSPENDED          same as PENDING                                       failed, WARN
RETRYING           ``dg.Failure`` with the operator's error (the          failed, ERROR
                   operator keeps retrying; the sensor shows recovery)
FAILED / UNKNOWN   ``dg.Failure`` with the operator's error               failed, ERROR
(no application)   ``dg.Failure``                                        failed, ERROR
=================  ====================================================  ==========================

A materialization here starts the long-running query (``continuous``, the default on this runner)
and does not wait for it: the op reports the version's gate checks from the registry when its gate
ran (the ``replay`` job, an ``until_caught_up`` materialization, ``kappa gate`` in a batch
SparkApplication), else yields no result for them (never a fake pass), so the UI shows each
selected check as skipped, and says why on the materialization itself: its ``gate`` metadata is
:data:`GATE_NOT_EVALUATED` (or, when a gate ran, what it recorded). An ``until_caught_up``
materialization, like the ``replay`` job, waits for catch-up (read from the checkpoint) and runs
the gate on the cluster.

Configuration: the ``KAPPA_K8S_*`` keys of the chart's ``kappa-config`` ConfigMap
(:meth:`KubernetesRunnerConfig.from_mapping`), overridden by ``KappaResource.kubernetes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import dagster as dg

from kappa.runners.base import Outcome, Runner, RunStatus
from kappa.streaming.checkpoint import QueryHealth

AppStatus = RunStatus

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.delta.registry import Registry
    from kappa.spec import Catalog

#: What the log says of gate checks a long-running start could not evaluate.
GATE_NOT_EVALUATED = ("not evaluated: a long-running start does not wait for catch-up; the gate runs in the "
                      "replay job or an until_caught_up materialization")

def use_kubernetes_api(api: Any):
    """Kept for tests: :func:`kappa.runners.kubernetes.client.use_kubernetes_api`."""
    from kappa.runners.kubernetes.client import use_kubernetes_api as use

    return use(api)


# ------------------------------------------------------------------------- the pure mappings


@dataclass(frozen=True)
class Decision:
    """What a materialization does with an application's status: ``materialized``, ``pending``
    (the application exists and is not running yet) or ``failed``."""

    kind: str
    description: str


def decide(status: AppStatus) -> Decision:
    """The Dagster outcome of a materialization that started ``status`` (see the module table)."""
    where = f"SparkApplication {status.namespace}/{status.name}"
    o = status.outcome
    if o is None:
        return Decision("failed", f"{where} does not exist (deleted while starting?)")
    if o is Outcome.RUNNING:
        return Decision("materialized", f"{where} is running")
    if o is Outcome.SUCCEEDED:
        return Decision("materialized", f"{where} completed (bounded run)")
    if o in (Outcome.PENDING, Outcome.SUSPENDED):
        return Decision("pending", f"{where} is {o.value} (state {status.state or 'NEW'}); not running yet")
    reason = status.error or "no error message from the operator"
    if o is Outcome.RETRYING:
        return Decision("failed", f"{where} failed (state {status.state}) and the operator is retrying: {reason}")
    return Decision("failed", f"{where} failed (state {status.state or 'none'}): {reason}")


def health_of(status: AppStatus) -> tuple[bool, dg.AssetCheckSeverity, str]:
    """(passed, severity, reason) of ``query_health`` for a version's application."""
    where = f"{status.asset}/v{status.version} (SparkApplication {status.namespace}/{status.name})"
    o = status.outcome
    if o in (Outcome.RUNNING, Outcome.SUCCEEDED):
        return True, dg.AssetCheckSeverity.ERROR, f"{where} is {o.value}"
    if o in (Outcome.PENDING, Outcome.SUSPENDED):
        return False, dg.AssetCheckSeverity.WARN, f"{where} is {o.value} (state {status.state or 'NEW'}): not running"
    if o is None:
        return False, dg.AssetCheckSeverity.ERROR, f"{where} has no SparkApplication: its query is not running"
    return False, dg.AssetCheckSeverity.ERROR, (
        f"{where} failed (state {status.state}): {status.error or 'no error message from the operator'}")


def status_metadata(status: AppStatus) -> dict[str, object]:
    """Dagster metadata of a version's SparkApplication: version, ``<asset>/v<N>``, application
    name and namespace, the operator's state (``NEW`` before it reports one), the outcome the
    state maps to (``missing``: no application), and the operator's error when there is one."""
    md: dict[str, object] = {
        "version": status.version,
        "version_name": f"{status.asset}/v{status.version}",
        "application": status.name,
        "namespace": status.namespace,
        "state": status.state or "NEW",
        "outcome": status.outcome.value if status.outcome else "missing",
    }
    if status.error:
        md["error"] = status.error
    return md


def materialize_event(status: AppStatus, metadata: dict[str, object]) -> dg.MaterializeResult | dg.AssetObservation:
    """:func:`decide` as Dagster: a ``MaterializeResult``, an ``AssetObservation`` (pending), or
    ``dg.Failure`` raised with the operator's error message."""
    key = dg.AssetKey(status.asset)
    d = decide(status)
    md = {**status_metadata(status), **metadata}
    if d.kind == "materialized":
        return dg.MaterializeResult(asset_key=key, metadata=md)
    if d.kind == "pending":
        return dg.AssetObservation(asset_key=key, metadata=md, description=d.description)
    raise dg.Failure(description=d.description, metadata=md)


# ---------------------------------------------------------------------------------- materialize


def gate_note(version) -> str:
    """The ``gate`` metadata of a detached materialization of ``version`` (a
    :class:`kappa.delta.registry.Version`): what its most recent recorded gate said
    (``passed``/``failed``, ``recorded in the registry``), or :data:`GATE_NOT_EVALUATED`."""
    from kappa.quality.gate import recorded_gate

    report = recorded_gate(version)
    if report is None:
        return GATE_NOT_EVALUATED
    return f"{'passed' if report.passed else 'failed'}: the gate recorded for {version.name} in the registry"


def start_detached(
    runner: Runner, catalog: "Catalog", name: str, context: dg.AssetExecutionContext, settings: "Settings",
    registry: "Registry",
) -> Iterator[dg.MaterializeResult]:
    """A long-running (``continuous``) materialization on a runner whose queries outlive the run
    (Kubernetes): resolve the version (the registry), start its SparkApplication, report it. The
    gate needs the caught-up table, which this does not wait for: the checks are reported from the
    registry when the version's gate ran (``kappa gate`` / the ``replay`` job), else not at all,
    and the materialization's ``gate`` metadata says which (:func:`gate_note`). Reads and records
    through ``registry``, the run's snapshot."""
    from kappa.delta.declarations import recorded_spec
    from kappa.runners.versions import resolve_versions

    version = resolve_versions(catalog, [name], registry)[name]
    context.log.info(f"starting {version.name} on the {runner.kind} runner")
    status = runner.start(recorded_spec(settings, version, catalog[name]), version)
    if status.outcome is Outcome.RUNNING and version.state != "running":
        registry.record(name, version.version, "running", mode=runner.kind, application=status.name)
    elif status.outcome is Outcome.FAILED:
        registry.record(name, version.version, "failed", error=status.error, application=status.name)
    metadata: dict[str, object] = {
        "runner": runner.kind,
        "table_path": dg.MetadataValue.path(version.table_path),
        "checkpoint_path": dg.MetadataValue.path(version.checkpoint_path),
        "gate": gate_note(version),
    }
    if version.upstream:
        metadata["upstream_versions"] = dg.MetadataValue.json(version.upstream)
    event = materialize_event(status, metadata)
    if isinstance(event, dg.AssetObservation):
        context.log.warning(f"{event.description}; no materialization recorded (materialize again to re-check)")
        context.log_event(event)
    else:
        yield event


# ------------------------------------------------------------------------------------ observing


def observe(
    settings: "Settings", catalog: "Catalog", runner: Runner, names: list[str] | None = None,
    stall_after_s: float = 300.0,
) -> list[QueryHealth]:
    """``query_health`` of the latest version of every asset in ``names`` (default: all): the
    reading every runner gives (:func:`kappa.streaming.checkpoint.observe`: the committed offsets
    from the version's checkpoint, on the object store here, against the log end offsets read with
    this pod's Kafka credentials, ``KAPPA_KAFKA_*`` of the chart's ``kappa-config`` and the control
    KafkaUser's JAAS line), so the lag per partition is the number ``kappa status`` shows; and the
    state of the version's SparkApplication, which decides whether its query runs. Unhealthy when
    the application is not running (:func:`health_of`'s reason and severity), else when the
    reading is (a stalled query, a broker that does not answer)."""
    from kappa.streaming.checkpoint import observe as read

    out: list[QueryHealth] = []
    for health in read(settings, catalog, stall_after_s, names=names):
        status = runner.status(health.asset, health.version)
        passed, severity, reason = health_of(status)
        health.application, health.application_state = status.name, status.state or "NEW"
        if not passed:
            health.healthy, health.severity, health.reason = False, severity.value, reason
        elif health.healthy:
            health.reason = f"{reason}; lag {health.total_lag}"
        out.append(health)
    return out
