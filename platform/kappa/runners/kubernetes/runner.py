"""The ``kubernetes`` runner: one asset version runs as one long-running SparkApplication; its gate
as one batch SparkApplication. Implements :class:`kappa.runners.base.Runner`.

Catch-up is read from the version's checkpoint on the object store
(:func:`kappa.streaming.checkpoint.read_checkpoint` through ``pyarrow.fs``) against the target the
caller took when the run started (the log end offsets), polling until it is reached: no sleeping
for a guessed time. The application's state is read on every poll, so a failed driver ends the
wait with the operator's message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kappa.delta.archive import archived_records
from kappa.runners.base import AssetRunResult, Outcome, ProgressCallback, RunError, RunStatus
from kappa.runners.kubernetes.application import build_gate_application, build_spark_application
from kappa.runners.kubernetes.client import SparkApplications
from kappa.runners.kubernetes.config import KubernetesRunnerConfig
from kappa.runners.kubernetes.naming import application_name, gate_application_name
from kappa.runners.kubernetes.states import error_message, outcome_of, state_of

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.delta.registry import Registry, Version
    from kappa.quality.gate import GateReport
    from kappa.spec import AssetSpec, Catalog
    from kappa.streaming.checkpoint import CatchUpTarget

#: Kept for callers of the earlier name.
AppStatus = RunStatus


class KubernetesRunner:
    """Start, observe and stop asset versions as SparkApplications (one per version).

    ``start`` is idempotent: an existing application of the version is observed, never replaced
    (its checkpoint is the version's; a second query on it must never run). Waiting polls ``get``
    every ``poll_s`` seconds (the chart's Role grants get; a poll needs no list permission) for at
    most ``start_timeout_s`` seconds: the operator submits within seconds, but pulling the image
    onto a fresh node can take a minute or two, hence the 120 s default.

    Example::

        runner = KubernetesRunner.from_settings(settings)      # KAPPA_K8S_* from the environment
        status = runner.start(catalog["flights"], registry.version("flights", 2))
        status.outcome  # Outcome.RUNNING, or PENDING if still starting after 120 s
        runner.stop("flights", 1)
    """

    kind = "kubernetes"
    #: Queries outlive the process that started them (the cluster runs them).
    detached = True

    def __init__(
        self,
        cfg: KubernetesRunnerConfig,
        settings: "Settings",
        apps: SparkApplications | None = None,
        *,
        poll_s: float = 2.0,
        start_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.cfg, self.settings = cfg, settings
        self.apps = apps or SparkApplications(cfg.namespace)
        self.poll_s, self.start_timeout_s, self._clock, self._sleep = poll_s, start_timeout_s, clock, sleep

    @staticmethod
    def identity(api_client: Any | None = None) -> dict:
        """Who runs this command as the API server authenticated them (a SelfSubjectReview):
        ``{"user", "groups", "source"}``. ``api_client``: a ``kubernetes.client.ApiClient`` to ask
        with (default: the in-cluster service account, else the caller's kubeconfig,
        ``$KUBECONFIG`` or ``~/.kube/config``). Raises :class:`~kappa.runners.base.RunError` when the
        API server cannot be asked."""
        from kappa.runners.base import RunError

        try:
            from kubernetes import client, config

            if api_client is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
            review = client.AuthenticationV1Api(api_client).create_self_subject_review(
                body=client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview"))
        except Exception as exc:  # noqa: BLE001 - no identity, whatever the cause
            raise RunError(f"the API server's SelfSubjectReview failed "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        info = review.status.user_info
        return {"user": info.username or "", "groups": list(info.groups or []), "source": "kubernetes SelfSubjectReview"}

    @staticmethod
    def refuses_source_topics(spec: Any) -> str | None:
        """Why an asset declared at run time may not read its Kafka topics here (None: it reads
        none): a query reads Kafka as the asset's own KafkaUser, which the chart creates only for
        the assets of its catalog."""
        from kappa.runners.kubernetes.naming import kafka_user_name

        if not spec.topics:
            return None
        return (f"{', '.join(spec.topics)} not covered by the chart's KafkaUsers: on Kubernetes an asset reads "
                f"Kafka as its own KafkaUser ({kafka_user_name(spec.name)}), which the chart creates only for "
                "the assets of its catalog (helm/kappa/catalog.yaml, from assets/); declare it as a file in "
                "assets/ and upgrade the chart, or read an upstream asset's table instead")

    @classmethod
    def from_settings(
        cls, settings: "Settings", *, config: KubernetesRunnerConfig | Mapping[str, str] | None = None,
        api: Any | None = None, poll_s: float = 2.0, start_timeout_s: float = 120.0, **_ignored: Any,
    ) -> "KubernetesRunner":
        """A runner for ``settings`` (warehouse, checkpoints, Kafka) with ``config`` (default:
        ``KAPPA_K8S_*``, read by :func:`kappa.config.kubernetes_values`); ``api``: a
        ``CustomObjectsApi``-like object (default: the cluster's)."""
        from kappa.config import kubernetes_values

        if not isinstance(config, KubernetesRunnerConfig):
            config = KubernetesRunnerConfig.from_mapping({**kubernetes_values(), **(config or {})})
        return cls(config, settings, SparkApplications(config.namespace, api=api), poll_s=poll_s,
                   start_timeout_s=start_timeout_s)

    # -- status -----------------------------------------------------------------------------------
    def _status(self, asset: str, version: int, name: str, app: Mapping[str, Any] | None,
                created: bool = False, streaming: bool = True) -> RunStatus:
        outcome = None if app is None else outcome_of(app, streaming=streaming)
        return RunStatus(
            asset=asset, version=version, name=name, namespace=self.apps.namespace,
            outcome=outcome, state=state_of(app) if app is not None else "",
            error=error_message(app) if outcome in (Outcome.FAILED, Outcome.RETRYING, Outcome.UNKNOWN) else "",
            created=created,
        )

    def status(self, asset: str, version: int) -> RunStatus:
        """What the cluster says of the version's (streaming) SparkApplication now: one GET, no
        waiting. ``outcome`` None when it does not exist; ``error`` the operator's message when it
        failed, retries or is in an unknown state. Raises ``ApiException`` for API errors other
        than 404."""
        name = application_name(asset, version)
        return self._status(asset, version, name, self.apps.get(name))

    def outcome(self, asset: str, version: int) -> Outcome | None:
        """The :class:`~kappa.runners.base.Outcome` of :meth:`status` (None: no application)."""
        return self.status(asset, version).outcome

    # -- start / stop -----------------------------------------------------------------------------
    def _create_and_wait(self, asset: str, version: int, name: str, body: Callable[[], dict],
                         timeout_s: float, streaming: bool) -> RunStatus:
        from kubernetes.client.exceptions import ApiException

        app = self.apps.get(name)
        created = False
        if app is None:
            try:
                app = self.apps.create(body())
                created = True
            except ApiException as exc:
                if exc.status != 409:  # 409: someone created it since our get; observe theirs
                    raise
                app = self.apps.get(name)
        if app is not None:
            self._provide_key(app, created)
        if app is not None and self.cfg.network_policies:
            self._isolate(app, created)
        deadline = self._clock() + timeout_s
        while True:
            status = self._status(asset, version, name, app, created, streaming)
            if status.outcome is None or status.outcome is Outcome.RUNNING or status.outcome.terminal:
                return status
            if self._clock() >= deadline:
                return status
            self._sleep(self.poll_s)
            app = self.apps.get(name)

    def _provide_key(self, app: Mapping[str, Any], created: bool) -> None:
        """Create the application's Spark RPC key Secret (:meth:`SparkApplications.provide_auth_secret`);
        its driver and executors wait for it (a pod does not start before its Secret volume
        exists). Refused: see :meth:`_companion`."""
        self._companion(app, created, self.apps.provide_auth_secret, "its Spark RPC key Secret",
                        "the run account needs create on secrets (the chart's Role kappa-dagster-sparkapplications)")

    def _isolate(self, app: Mapping[str, Any], created: bool) -> None:
        """Create the application's peers NetworkPolicy (:meth:`SparkApplications.isolate`): on a
        cluster that enforces the chart's policies its driver could not reach its executors without
        it. Refused: see :meth:`_companion`."""
        self._companion(app, created, self.apps.isolate, "its peers NetworkPolicy",
                        "the run account needs get and create on networkpolicies (the chart's Role "
                        "kappa-dagster-sparkapplications), or set KAPPA_K8S_NETWORK_POLICIES=false where the "
                        "cluster enforces no NetworkPolicies")

    def _companion(self, app: Mapping[str, Any], created: bool, make, what: str, remedy: str) -> None:
        """``make(app)``, an object the application needs beside it; when the API server refuses it,
        delete the application this call created and raise :class:`~kappa.runners.base.RunError`
        naming ``what``, the server's reason and ``remedy``."""
        from kubernetes.client.exceptions import ApiException

        try:
            make(app)
        except ApiException as exc:
            name = app["metadata"]["name"]
            if created:
                self.apps.delete(name)
            raise RunError(
                f"SparkApplication {self.apps.namespace}/{name}: {what} was refused "
                f"({exc.status} {exc.reason}: {str(exc.body or '')[:300]}); {remedy}"
                + ("; the application was deleted" if created else "")) from exc

    def start(self, spec: "AssetSpec", version: "Version", *, bounded: bool = False,
              timeout_s: float | None = None) -> RunStatus:
        """Create the version's SparkApplication unless it exists, then wait until it is RUNNING or
        terminal (FAILED, SUCCEEDED) or ``timeout_s`` (default ``start_timeout_s``) passed; returns
        the last status seen. ``bounded`` changes nothing: the application is a long-running query
        and catch-up is read from its checkpoint. Raises ``ValueError`` when the version record
        misses upstream versions, ``ApiException`` for API errors other than a creation race (409)."""
        name = application_name(spec.name, version.version)
        return self._create_and_wait(
            spec.name, version.version, name,
            lambda: build_spark_application(spec, version, self.cfg, self.settings),
            self.start_timeout_s if timeout_s is None else timeout_s, streaming=True)

    def stop(self, asset: str, version: int) -> bool:
        """Stop the version's query by deleting its application; False if there was none. Its
        table and checkpoint stay."""
        return self.apps.delete(application_name(asset, version))

    # -- catch-up ---------------------------------------------------------------------------------
    def wait_until_caught_up(
        self, spec: "AssetSpec", version: "Version", target: "CatchUpTarget", *,
        timeout_s: float | None = None, on_progress: ProgressCallback | None = None,
    ) -> AssetRunResult:
        """Poll the version's checkpoint (and its application's state) every ``poll_s`` seconds
        until :func:`~kappa.streaming.checkpoint.remaining` is 0. Raises
        :class:`kappa.runners.base.RunError` when the application failed (with the operator's
        message), disappeared, or ``timeout_s`` passed."""
        from kappa.streaming.checkpoint import read_checkpoint, remaining

        started = self._clock()
        start_offsets = (version.last("created") or {}).get("start_offsets") or {}
        archived = archived_records(version.last("created"))
        last_batch = None
        while True:
            status = self.status(spec.name, version.version)
            if status.outcome is None:
                raise RunError(f"{version.name}: its SparkApplication {status.namespace}/{status.name} does not exist")
            if status.outcome in (Outcome.FAILED, Outcome.SUCCEEDED):
                raise RunError(f"{version.name} failed (SparkApplication {status.namespace}/{status.name}, "
                               f"state {status.state}): {status.error or 'no message from the operator'}")
            cp = read_checkpoint(version.checkpoint_path, self.settings)
            left = remaining(cp, target, start_offsets, archived)
            if on_progress is not None and cp.batch_id is not None and cp.batch_id != last_batch:
                last_batch = cp.batch_id
                on_progress(spec.name, {"batchId": cp.batch_id, "numInputRows": 0, "remaining": left,
                                        "committed": cp.offsets})
            if left == 0:
                return checkpoint_result(self.settings, spec, version, cp, self._clock() - started)
            if timeout_s is not None and self._clock() - started >= timeout_s:
                raise RunError(f"{version.name} did not catch up within {timeout_s:.0f} s: {left} to read "
                               f"(SparkApplication {status.namespace}/{status.name} is {status.state or 'NEW'})")
            self._sleep(self.poll_s)

    # -- the gate ---------------------------------------------------------------------------------
    def gate(self, asset: str, version: int, registry: "Registry", catalog: "Catalog | None" = None, *,
             timeout_s: float = 1800.0) -> "GateReport":
        """Run the gate as a batch SparkApplication (``kappa gate ASSET VERSION`` in the image),
        wait until it ends, then return the report it recorded in the registry (``registry`` is
        refreshed once it ended: the job's events are another process's). A leftover gate
        application of the version is deleted first (a gate is re-run by re-creating it). Raises
        :class:`kappa.runners.base.RunError` when the job ended without recording a result."""
        from kappa.quality.gate import recorded_gate
        from kappa.delta.declarations import catalog as catalog_of, recorded_spec

        record = registry.version(asset, version)
        spec = recorded_spec(self.settings, record, (catalog or catalog_of(self.settings)).assets.get(asset))
        before = len([e for e in record.events if e["event"] in ("gate_passed", "gate_failed")])
        name = gate_application_name(asset, version)
        self.apps.delete(name)
        deadline = self._clock() + timeout_s
        status = self._create_and_wait(asset, version, name,
                                       lambda: build_gate_application(spec, record, self.cfg, self.settings),
                                       self.start_timeout_s, streaming=False)
        while status.outcome is not None and not status.outcome.terminal and self._clock() < deadline:
            self._sleep(self.poll_s)
            status = self._status(asset, version, name, self.apps.get(name), streaming=False)
        record = registry.refresh().version(asset, version)  # the gate job's events: another process's
        gated = [e for e in record.events if e["event"] in ("gate_passed", "gate_failed")]
        if len(gated) <= before:
            raise RunError(f"the gate of {record.name} (SparkApplication {status.namespace}/{name}) recorded no "
                           f"result: state {status.state or 'missing'}: {status.error or 'no message from the operator'}")
        return recorded_gate(record)


def checkpoint_result(settings: "Settings", spec: "AssetSpec", version: "Version", cp, seconds: float) -> AssetRunResult:
    """An :class:`AssetRunResult` read without Spark: rows and Delta version of the table through
    delta-rs, records read as the gate counts them
    (:func:`kappa.streaming.checkpoint.records_read_through`), quarantined and late rows of this
    version from the shared tables."""
    from kappa.delta.registry import late_events_path, quarantine_path
    from kappa.delta.tables import count_of, table_rows
    from kappa.streaming.checkpoint import records_read_through

    rows, delta_version = table_rows(version.table_path, settings)
    read = records_read_through(cp, version.last("created"))
    kafka = {t: p for t, p in cp.offsets.items() if isinstance(p, dict)} if spec.topics else {}
    quarantined = late = 0
    from kappa.streaming.kinds import kind_of

    kind = kind_of(spec)
    if kind.quarantines:
        quarantined = count_of(str(quarantine_path(settings)), spec.name, version.version, settings)
    if kind.keeps_late_rows:
        late = count_of(str(late_events_path(settings)), spec.name, version.version, settings)
    return AssetRunResult(
        asset=spec.name, version=version.version, rows=rows, input_rows=read if spec.topics else 0,
        # 0: the driver counts Spark's drops itself and records them as ``dropped`` events
        # (kappa.runners.entrypoint.watch); counting them here too would count them twice.
        quarantined=quarantined, late_events=late, dropped_by_watermark=0, seconds=round(seconds, 2),
        batches=(cp.batch_id + 1) if cp.batch_id is not None else 0, delta_version=delta_version,
        end_offsets=kafka,
        input_rows_per_s=round(read / seconds, 1) if seconds > 0 and spec.topics else 0.0,
    )
