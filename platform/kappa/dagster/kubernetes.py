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

Gate checks are **not evaluated** in this mode: the gate reads the version's table on the object
store with Spark after the query caught up, and a materialization here only starts the query. The
op yields no result for them (never a fake pass). Dagster 1.13 accepts that outside Pipes' typed
event stream: ``dagster/_core/execution/plan/compute.py`` logs "did not yield or return expected
outputs" (an error only when ``requires_typed_event_stream``), ``plan/active.py`` warns "Blocking
asset check … emitted no result …; downstream step … will proceed without gating on it", and the
planned evaluations never get a result. The op also logs which checks were not evaluated and why,
and the materialization carries ``gate: not evaluated …``.

Configuration: the ``KAPPA_K8S_*`` keys of the chart's ``kappa-config`` ConfigMap
(:meth:`KubernetesRunnerConfig.from_mapping`), overridden by ``KappaResource.kubernetes``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import dagster as dg

from kappa.config import kubernetes_values
from kappa.streaming.checkpoint import QueryHealth
from kappa.runners.kubernetes import (
    AppStatus,
    KubernetesRunner,
    KubernetesRunnerConfig,
    Outcome,
    SparkApplications,
    version_path,
)

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.dagster.resources import KappaResource
    from kappa.spec import Catalog

#: Metadata value of the gate in this mode (on the materialization and in the log).
GATE_NOT_EVALUATED = "not evaluated: the kubernetes runner only starts the query; the gate needs the caught-up table"

_api_override: list[Any] = []


@contextlib.contextmanager
def use_kubernetes_api(api: Any) -> Iterator[None]:
    """Make every runner built in this process talk to ``api`` (a ``CustomObjectsApi``-like object)
    instead of the cluster's. Tests use it: no API server can run on the build machine."""
    _api_override.append(api)
    try:
        yield
    finally:
        _api_override.remove(api)


def runner_config(kappa: "KappaResource") -> KubernetesRunnerConfig:
    """``KAPPA_K8S_*`` (read by :func:`kappa.config.kubernetes_values`), then ``kappa.kubernetes``
    overrides."""
    values = kubernetes_values()
    values.update({f"KAPPA_K8S_{k.upper()}": str(v) for k, v in (kappa.kubernetes or {}).items()})
    return KubernetesRunnerConfig.from_mapping(values)


def build_runner(kappa: "KappaResource") -> KubernetesRunner:
    cfg = runner_config(kappa)
    api = _api_override[-1] if _api_override else None
    return KubernetesRunner(cfg, SparkApplications(cfg.namespace, api=api), poll_s=kappa.kubernetes_poll_s)


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


def materialize(
    catalog: "Catalog", name: str, context: dg.AssetExecutionContext,
    kappa: "KappaResource", settings: "Settings",
) -> Iterator[dg.MaterializeResult]:
    """Body of a streaming asset's op on the kubernetes runner: resolve the version (the registry),
    start its SparkApplication, report it; gate checks are not evaluated (module doc)."""
    from kappa.delta.registry import Registry
    from kappa.runners.local import resolve_versions

    key = dg.AssetKey(name)
    runner = build_runner(kappa)
    registry = Registry(settings)
    wanted = [ck.name for ck in context.selected_asset_check_keys if ck.asset_key == key]
    if key in context.selected_asset_keys:
        version = resolve_versions(catalog, [name], registry)[name]
        spec = catalog[name]
        context.log.info(f"starting {version.name} as a SparkApplication in {runner.cfg.namespace}")
        status = runner.start(spec, version.version, version.upstream, timeout_s=kappa.kubernetes_start_timeout_s)
        if status.outcome is Outcome.RUNNING and version.state != "running":
            registry.record(name, version.version, "running", mode="kubernetes", application=status.name)
        elif status.outcome is Outcome.FAILED:
            registry.record(name, version.version, "failed", error=status.error, application=status.name)
        metadata: dict[str, object] = {
            "runner": "kubernetes",
            "table_path": dg.MetadataValue.path(version_path(runner.cfg.warehouse, name, version.version)),
            "checkpoint_path": dg.MetadataValue.path(version_path(runner.cfg.checkpoints, name, version.version)),
            "gate": GATE_NOT_EVALUATED if wanted else "not selected",
        }
        if version.upstream:
            metadata["upstream_versions"] = dg.MetadataValue.json(version.upstream)
        event = materialize_event(status, metadata)
        if isinstance(event, dg.AssetObservation):
            context.log.warning(f"{event.description}; no materialization recorded (materialize again to re-check)")
            context.log_event(event)
        else:
            yield event
    if wanted:
        context.log.warning(f"{name}: gate checks {wanted} {GATE_NOT_EVALUATED}; they are reported as skipped")


# ------------------------------------------------------------------------------------ observing


def observe(
    settings: "Settings", catalog: "Catalog", runner: KubernetesRunner, names: list[str] | None = None,
) -> list[QueryHealth]:
    """``query_health`` of the latest version of every asset in ``names`` (default: all) from its
    SparkApplication's state. Consumer lag is not observed in this mode (the checkpoint is on the
    object store and the broker needs the KafkaUser's credentials)."""
    from kappa.delta.registry import Registry

    registry = Registry(settings)
    out: list[QueryHealth] = []
    for name in catalog.topological(names):
        version = registry.latest(name)
        if version is None:
            continue
        status = runner.status(name, version.version)
        passed, severity, reason = health_of(status)
        out.append(QueryHealth(
            asset=name, version=version.version, state=version.state, healthy=passed, reason=reason,
            severity=severity.value, application=status.name, application_state=status.state or "NEW",
        ))
    return out
