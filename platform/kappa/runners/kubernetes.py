"""The ``kubernetes`` runner: one streaming asset version runs as one long-running ``SparkApplication``.

The Kubeflow Spark operator (``sparkoperator.k8s.io/v1beta2``) turns a SparkApplication into a driver
pod and executors. This module

* builds that object for one asset version (:func:`build_spark_application`): the Kappa image, driver
  and executor resources (from the asset YAML's optional ``resources`` block, else defaults), a
  restart-on-failure policy with backoff, the table and checkpoint of the version on the object store
  (``<warehouse>/<asset>/v<N>``, ``<checkpoints>/<asset>/v<N>``), Kafka credentials from the asset's
  KafkaUser Secret and the object-store credentials from an existing Secret (never inline);
* creates, reads and deletes it through the official ``kubernetes`` client (:class:`SparkApplications`);
* maps the operator's application state to a front-end-neutral :class:`Outcome`
  (:func:`outcome_of`), treating a *streaming* application that the operator reports as completed
  as failed: a streaming query never ends on its own, so a driver that exited 0 stopped unexpectedly;
* generates the Helm chart's catalog of Kafka topics and users from ``assets/`` (:func:`chart_catalog`),
  so the KafkaTopics and least-privilege KafkaUsers always match the declarations.

This module does not import Dagster (Dagster code calls it). It reads no environment variable:
:class:`KubernetesRunnerConfig` is passed in by the caller (``kappa.config`` owns the environment).

Naming (shared by the chart generator and the runner, so ACLs and Secrets line up):

=========================  ==============================================  ==========================
what                       name                                            example (``flights_bronze``)
=========================  ==============================================  ==========================
KafkaUser and its Secret   ``kappa-asset-<name, _ -> ->``                  ``kappa-asset-flights-bronze``
consumer-group prefix      ``kappa-<name>-`` (ACL, prefix pattern)         ``kappa-flights_bronze-``
group id prefix of v<N>    ``kappa-<name>-v<N>-``                          ``kappa-flights_bronze-v3-``
SparkApplication           ``<name, _ -> ->>-v<N>``                        ``flights-bronze-v3``
=========================  ==============================================  ==========================

Asset names match ``[a-z][a-z0-9_]*`` (no ``-``), so the ``-`` that ends a group prefix cannot be part
of another asset's name: the prefix ACL of ``flights`` does not cover ``flights_bronze``'s groups.

Example::

    cfg = KubernetesRunnerConfig(image="registry.example/kappa:0.1.0",
                                 warehouse="s3a://lake/warehouse", checkpoints="s3a://lake/checkpoints")
    app = build_spark_application(catalog["flights_bronze"], 3, cfg)
    SparkApplications(cfg.namespace).create(app)
    outcome_of(SparkApplications(cfg.namespace).get("flights-bronze-v3"))  # Outcome.RUNNING
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kappa.spec import AssetResources, AssetSpec, Catalog, Resources, load_catalog

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkApplication"
PLURAL = "sparkapplications"

#: The Spark entry point inside the Kappa image: a two-line shim (see the Dockerfile) that runs
#: ``python -m kappa.runners.entrypoint``; the operator's ``mainApplicationFile`` must be a file.
ENTRYPOINT_FILE = "local:///opt/kappa/bin/entrypoint.py"
#: Where the Kafka cluster CA certificate (PEM) is mounted in driver and executor pods.
KAFKA_CA_DIR = "/etc/kappa/kafka-ca"
#: Label every Kappa-created SparkApplication carries (selectors, NetworkPolicies, clean-up).
LABEL_ASSET = "kappa.dev/asset"
LABEL_VERSION = "kappa.dev/version"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_KAFKA_CLIENT = "kappa.dev/kafka-client"
COMPONENT = "streaming-asset"

_K8S_NAME_MAX = 63


# --------------------------------------------------------------------------------------- naming


def dns_name(asset: str) -> str:
    """``flights_bronze`` -> ``flights-bronze`` (Kubernetes names allow no ``_``)."""
    return asset.replace("_", "-")


def kafka_user_name(asset: str) -> str:
    """The KafkaUser (and the Secret Strimzi's user operator writes) of one streaming asset."""
    return f"kappa-asset-{dns_name(asset)}"


def group_prefix(asset: str) -> str:
    """The consumer-group prefix one asset may use (a ``prefix`` ACL); ends in ``-``, which no asset
    name contains, so one asset's prefix never covers another's groups."""
    return f"kappa-{asset}-"


def application_name(asset: str, version: int) -> str:
    """``flights_bronze``, 3 -> ``flights-bronze-v3``. Raises ``ValueError`` if longer than 63
    characters (the operator derives Service names from it, which are DNS labels)."""
    name = f"{dns_name(asset)}-v{version}"
    if len(name) > _K8S_NAME_MAX:
        raise ValueError(f"SparkApplication name {name!r} is longer than {_K8S_NAME_MAX} characters")
    return name


def version_path(root: str, asset: str, version: int) -> str:
    """``s3a://lake/warehouse``, ``flights``, 2 -> ``s3a://lake/warehouse/flights/v2``."""
    return f"{root.rstrip('/')}/{asset}/v{version}"


# --------------------------------------------------------------------------------------- config


class KubernetesRunnerConfig(BaseModel):
    """Everything the runner needs that is not in the asset YAML. The Helm chart's ``kappa-config``
    ConfigMap carries the same values as ``KAPPA_K8S_*``/``KAPPA_*`` environment variables.

    ``warehouse`` and ``checkpoints`` are object-store roots (``s3a://bucket/prefix``); the secrets
    are *names* of existing Kubernetes Secrets, never their contents.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "kappa"
    image: str
    image_pull_policy: str = "IfNotPresent"
    spark_version: str = "4.1.3"
    #: Driver service account (created by the spark-operator chart in the job namespace).
    service_account: str = "kappa-spark"
    warehouse: str
    checkpoints: str
    #: Strimzi's bootstrap Service of the TLS listener: ``<cluster>-kafka-bootstrap:<port>``.
    bootstrap_servers: str = "kappa-kafka-bootstrap:9093"
    #: The Strimzi Kafka cluster name; its CA certificate Secret is ``<cluster>-cluster-ca-cert``.
    kafka_cluster: str = "kappa"
    object_store_secret: str = "kappa-object-store"
    object_store_access_key_key: str = "AWS_ACCESS_KEY_ID"
    object_store_secret_key_key: str = "AWS_SECRET_ACCESS_KEY"
    #: S3-compatible endpoint (MinIO, Ceph …); None = AWS S3 with the SDK's default endpoint.
    s3_endpoint: str | None = None
    s3_path_style_access: bool = False
    #: ``spark.jars``: the Maven-resolved jars inside the image (``local://`` URIs).
    jars: tuple[str, ...] = ()
    driver: Resources = Resources(cores=1, memory="2g")
    executor: Resources = Resources(cores=1, memory="2g")
    executor_instances: int = Field(1, ge=1)
    #: Operator retries after a driver failure; the wait grows linearly (attempt x interval), see
    #: spark-operator ``pkg/util/sparkapplication.go`` ``TimeUntilNextRetryDue``. 10 x 30 s spans
    #: ~27 minutes of broker or object-store outage before the application is reported failed.
    on_failure_retries: int = Field(10, ge=0)
    on_failure_retry_interval_s: int = Field(30, ge=1)
    on_submission_failure_retries: int = Field(5, ge=0)
    on_submission_failure_retry_interval_s: int = Field(60, ge=1)
    spark_conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("warehouse", "checkpoints")
    @classmethod
    def _object_store(cls, v: str) -> str:
        if not v.startswith("s3a://"):
            raise ValueError(f"{v!r}: on Kubernetes tables and checkpoints live on the object store (s3a://…)")
        return v.rstrip("/")

    @classmethod
    def from_mapping(cls, values: Mapping[str, str], prefix: str = "KAPPA_K8S_") -> "KubernetesRunnerConfig":
        """A config from flat string settings such as the chart's ``kappa-config`` ConfigMap
        (``KAPPA_K8S_IMAGE``, ``KAPPA_K8S_WAREHOUSE``, ``KAPPA_K8S_DRIVER_MEMORY`` …); keys without
        ``prefix`` are ignored. ``JARS_DIR`` lists the image's jars into ``jars`` (see
        :meth:`with_jars_from`). The caller passes the mapping (``kappa.config`` reads the
        environment). Raises ``pydantic.ValidationError`` naming a bad or unknown key."""
        flat = {k[len(prefix):].lower(): v for k, v in values.items() if k.startswith(prefix)}
        fields: dict[str, Any] = {}
        for role in ("driver", "executor"):
            sub = {k[len(role) + 1:]: flat.pop(k) for k in list(flat) if k.startswith(f"{role}_") and k != "executor_instances"}
            if sub:
                fields[role] = Resources.model_validate(sub)
        jars_dir = flat.pop("jars_dir", None)
        if "spark_conf" in flat:
            fields["spark_conf"] = dict(
                kv.split("=", 1) for kv in flat.pop("spark_conf").split(",") if "=" in kv
            )
        fields.update(flat)
        if jars_dir:
            return cls.with_jars_from(Path(jars_dir), image_dir=jars_dir, **fields)
        return cls.model_validate(fields)

    @classmethod
    def with_jars_from(cls, jars_dir: Path, image_dir: str = "/opt/kappa/jars/spark", **fields: Any) -> "KubernetesRunnerConfig":
        """A config whose ``jars`` are the ``*.jar`` files of ``jars_dir`` as ``local://`` URIs under
        ``image_dir``. Inside the Kappa image (where Dagster's code location runs) ``jars_dir`` *is*
        ``image_dir``, so the list is exactly what the image holds."""
        names = sorted(p.name for p in Path(jars_dir).glob("*.jar"))
        return cls(jars=tuple(f"local://{image_dir.rstrip('/')}/{n}" for n in names), **fields)


def asset_resources(spec: AssetSpec) -> AssetResources:
    """The asset's ``resources`` block (empty when the YAML declares none)."""
    return spec.resources or AssetResources()


# ------------------------------------------------------------------------------ SparkApplication


def _pod_security_context() -> dict:
    # Pod Security "restricted": non-root, RuntimeDefault seccomp. 185 is the uid Spark's own
    # images use for `spark`; the Kappa image creates the same user.
    return {
        "runAsNonRoot": True,
        "runAsUser": 185,
        "runAsGroup": 185,
        "fsGroup": 185,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container_security_context() -> dict:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": False,  # Spark writes scratch files under /tmp and $SPARK_HOME/work
    }


def _secret_env(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


#: Container names Spark looks up in a pod template (``spark.kubernetes.{driver,executor}.
#: podTemplateContainerName``, which the operator sets to these).
TEMPLATE_CONTAINERS = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}


def _role(
    kind: str,
    res: Resources,
    cfg: KubernetesRunnerConfig,
    labels: dict[str, str],
    env: list[dict],
    mounts: list[dict],
    volumes: list[dict],
) -> dict:
    """The ``driver`` or ``executor`` block. Security contexts, environment (with Secret
    references), volumes and mounts go into the role's pod ``template``, not into the role's own
    ``podSecurityContext``/``securityContext``/``env``/``volumeMounts`` fields: the operator's
    controller passes only the template (as ``spark.kubernetes.*.podTemplateFile``) and plain
    settings to spark-submit; those other fields reach the pods only through its optional mutating
    webhook. Without the template, Pod Security ``restricted`` refused the driver pod (tried on
    kube-apiserver v1.34.4 with the operator v2.5.2 controller). Spark builds the pods on top of the
    template and keeps these fields (Spark "Pod Template" docs)."""
    container: dict[str, Any] = {
        "name": TEMPLATE_CONTAINERS[kind],
        "securityContext": _container_security_context(),
        "env": env,
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {"securityContext": _pod_security_context(), "containers": [container]}
    if volumes:
        pod_spec["volumes"] = volumes
    role: dict[str, Any] = {
        "cores": res.cores,
        "memory": res.memory,
        "labels": dict(labels),
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if res.core_limit:
        role["coreLimit"] = res.core_limit
    if res.memory_overhead:
        role["memoryOverhead"] = res.memory_overhead
    return role


def spark_conf(spec: AssetSpec, version: int, cfg: KubernetesRunnerConfig) -> dict[str, str]:
    """The ``sparkConf`` of one asset version: s3a (credentials from environment variables that
    reference the object-store Secret), Delta, ``spark.jars``. Values are strings (the CRD's type)."""
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        # AWS SDK v2 (Hadoop 3.4): read AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, set from the Secret.
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
        "spark.hadoop.fs.s3a.path.style.access": str(cfg.s3_path_style_access).lower(),
        # Delta's S3 log store allows a single writer per table; each version has exactly one
        # query (its SparkApplication), which is what makes that safe.
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
        "spark.sql.streaming.checkpointLocation": version_path(cfg.checkpoints, spec.name, version),
        "spark.kubernetes.submission.waitAppCompletion": "false",
        "spark.ui.enabled": "false",
    }
    if cfg.s3_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = cfg.s3_endpoint
    if cfg.jars:
        conf["spark.jars"] = ",".join(cfg.jars)
    conf.update(cfg.spark_conf)
    return conf


def build_spark_application(
    spec: AssetSpec, version: int, cfg: KubernetesRunnerConfig, upstream: Mapping[str, int] | None = None,
) -> dict:
    """The ``SparkApplication`` (a plain dict, ready for the API or ``yaml.safe_dump``) that runs
    version ``version`` of ``spec`` as a long-running streaming query.

    ``upstream`` (asset -> version) pins the upstream versions an asset-sourced asset reads; they
    become ``--upstream NAME=VERSION`` arguments of the entrypoint, which refuses to start an
    asset-sourced asset without them. None leaves them out (an example manifest); a mapping that
    misses one of ``spec.upstream`` raises ``ValueError``.

    Driver and executor get the object-store keys as ``AWS_*`` variables from
    ``cfg.object_store_secret``. Assets that read Kafka also get, on the driver only (Spark passes
    the ``kafka.*`` options to executors with the tasks), the JAAS line of their KafkaUser Secret,
    and on both the cluster CA certificate mounted at :data:`KAFKA_CA_DIR`.

    Environment contract of ``kappa.runners.entrypoint`` (all ``KAPPA_*``): ``RUNNER``,
    ``WAREHOUSE``, ``CHECKPOINTS``, ``TABLE_PATH``, ``CHECKPOINT_PATH``, ``BOOTSTRAP_SERVERS``,
    ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_MECHANISM``, ``KAFKA_SASL_JAAS_CONFIG``,
    ``KAFKA_SSL_TRUSTSTORE_TYPE``, ``KAFKA_SSL_TRUSTSTORE_LOCATION``, ``KAFKA_GROUP_ID_PREFIX``.

    Raises ``ValueError`` for a version below 1 or a name too long for Kubernetes.
    """
    if version < 1:
        raise ValueError(f"version must be >= 1, got {version}")
    name = application_name(spec.name, version)
    arguments = ["--asset", spec.name, "--version", str(version)]
    if upstream is not None:
        missing = sorted(set(spec.upstream) - set(upstream))
        if missing:
            raise ValueError(f"{spec.name} reads {missing}: pass their versions as upstream")
        for up in sorted(spec.upstream):
            arguments += ["--upstream", f"{up}={int(upstream[up])}"]
    res = asset_resources(spec)
    driver_res = res.driver or cfg.driver
    executor_res = res.executor or cfg.executor
    instances = res.executor_instances or cfg.executor_instances
    labels = {
        "app.kubernetes.io/name": "kappa",
        "app.kubernetes.io/part-of": "kappa",
        LABEL_COMPONENT: COMPONENT,
        LABEL_ASSET: dns_name(spec.name),
        LABEL_VERSION: str(version),
    }
    if spec.topics:
        # The Kafka cluster's listener NetworkPolicy admits only pods carrying this label.
        labels[LABEL_KAFKA_CLIENT] = "true"
    common_env = [
        {"name": "KAPPA_RUNNER", "value": "kubernetes"},
        {"name": "KAPPA_WAREHOUSE", "value": cfg.warehouse},
        {"name": "KAPPA_CHECKPOINTS", "value": cfg.checkpoints},
        {"name": "KAPPA_TABLE_PATH", "value": version_path(cfg.warehouse, spec.name, version)},
        {"name": "KAPPA_CHECKPOINT_PATH", "value": version_path(cfg.checkpoints, spec.name, version)},
        _secret_env("AWS_ACCESS_KEY_ID", cfg.object_store_secret, cfg.object_store_access_key_key),
        _secret_env("AWS_SECRET_ACCESS_KEY", cfg.object_store_secret, cfg.object_store_secret_key_key),
    ]
    driver_env = list(common_env)
    executor_env = list(common_env)
    volumes: list[dict] = []
    mounts: list[dict] = []
    if spec.topics:
        kafka_env = [
            {"name": "KAPPA_BOOTSTRAP_SERVERS", "value": cfg.bootstrap_servers},
            {"name": "KAPPA_KAFKA_SECURITY_PROTOCOL", "value": "SASL_SSL"},
            {"name": "KAPPA_KAFKA_SASL_MECHANISM", "value": "SCRAM-SHA-512"},
            {"name": "KAPPA_KAFKA_SSL_TRUSTSTORE_TYPE", "value": "PEM"},
            {"name": "KAPPA_KAFKA_SSL_TRUSTSTORE_LOCATION", "value": f"{KAFKA_CA_DIR}/ca.crt"},
            {"name": "KAPPA_KAFKA_GROUP_ID_PREFIX", "value": f"{group_prefix(spec.name)}v{version}-"},
        ]
        driver_env += kafka_env + [
            # Strimzi's user operator writes `password` and the ready-made `sasl.jaas.config`.
            _secret_env("KAPPA_KAFKA_SASL_JAAS_CONFIG", kafka_user_name(spec.name), "sasl.jaas.config"),
        ]
        executor_env += kafka_env
        volumes.append({
            "name": "kafka-cluster-ca",
            "secret": {
                "secretName": f"{cfg.kafka_cluster}-cluster-ca-cert",
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
            },
        })
        mounts.append({"name": "kafka-cluster-ca", "mountPath": KAFKA_CA_DIR, "readOnly": True})

    driver = _role("driver", driver_res, cfg, labels, driver_env, mounts, volumes)
    driver["serviceAccount"] = cfg.service_account
    executor = _role("executor", executor_res, cfg, labels, executor_env, mounts, volumes)
    executor["instances"] = instances

    app_spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "mainApplicationFile": ENTRYPOINT_FILE,
        "arguments": arguments,
        "sparkVersion": cfg.spark_version,
        "sparkConf": spark_conf(spec, version, cfg),
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": cfg.on_failure_retries,
            "onFailureRetryInterval": cfg.on_failure_retry_interval_s,
            "onSubmissionFailureRetries": cfg.on_submission_failure_retries,
            "onSubmissionFailureRetryInterval": cfg.on_submission_failure_retry_interval_s,
        },
        "driver": driver,
        "executor": executor,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels},
        "spec": app_spec,
    }


# ------------------------------------------------------------------------------------- outcome


class Outcome(str, enum.Enum):
    """What a front end (Dagster, the CLI) needs to know about one SparkApplication."""

    PENDING = "pending"  # accepted, not running yet (new, submitted, waiting to re-run, resuming)
    RUNNING = "running"
    RETRYING = "retrying"  # failed; the operator will retry (or give up and report FAILED)
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"  # only for a bounded run (available-now); never for a streaming query
    FAILED = "failed"
    UNKNOWN = "unknown"  # the operator lost track of the driver, or a state this module doesn't know

    @property
    def terminal(self) -> bool:
        return self in (Outcome.SUCCEEDED, Outcome.FAILED)


#: Every ``ApplicationStateType`` of spark-operator v2 (api/v1beta2/sparkapplication_types.go).
#: COMPLETED and SUCCEEDING are resolved by :func:`outcome_of` (they depend on ``streaming``).
STATE_OUTCOMES: dict[str, Outcome] = {
    "": Outcome.PENDING,  # New: the operator has not picked it up yet
    "SUBMITTED": Outcome.PENDING,
    "PENDING_RERUN": Outcome.PENDING,
    "INVALIDATING": Outcome.PENDING,  # spec changed: the operator tears down and re-submits
    "RESUMING": Outcome.PENDING,
    "RUNNING": Outcome.RUNNING,
    "FAILING": Outcome.RETRYING,
    "SUBMISSION_FAILED": Outcome.RETRYING,
    "SUSPENDING": Outcome.SUSPENDED,
    "SUSPENDED": Outcome.SUSPENDED,
    "FAILED": Outcome.FAILED,
    "UNKNOWN": Outcome.UNKNOWN,
    "COMPLETED": Outcome.SUCCEEDED,
    "SUCCEEDING": Outcome.SUCCEEDED,
}


def state_of(app: Mapping[str, Any] | None) -> str:
    """``status.applicationState.state`` of a SparkApplication ("" before the operator set it)."""
    if not app:
        return ""
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def outcome_of(app_or_state: Mapping[str, Any] | str | None, *, streaming: bool = True) -> Outcome:
    """Map a SparkApplication (or its state string) to an :class:`Outcome`.

    ``streaming=True`` (the default; every Kappa asset version is a long-running query): COMPLETED
    and SUCCEEDING are FAILED. The operator reports a driver that exited with code 0 as completed,
    but a streaming query only ends when it is stopped (by deleting the application) or when it
    crashed in a way that still let the Python process exit cleanly. ``streaming=False`` (a bounded
    available-now run) maps them to SUCCEEDED. An unknown state maps to UNKNOWN, never raises.
    """
    state = app_or_state if isinstance(app_or_state, str) or app_or_state is None else state_of(app_or_state)
    state = (state or "").upper()
    if state in ("COMPLETED", "SUCCEEDING"):
        return Outcome.FAILED if streaming else Outcome.SUCCEEDED
    return STATE_OUTCOMES.get(state, Outcome.UNKNOWN)


def error_message(app: Mapping[str, Any] | None) -> str:
    """The operator's error message for a failed application, or a plain explanation for a
    streaming application reported completed."""
    state = state_of(app)
    msg = str((((app or {}).get("status") or {}).get("applicationState") or {}).get("errorMessage") or "")
    if not msg and state in ("COMPLETED", "SUCCEEDING"):
        return "the streaming query's driver exited although a streaming query never completes on its own"
    return msg


# ----------------------------------------------------------------------------------- API client


class SparkApplications:
    """Create, get, delete and list Kappa's SparkApplications in one namespace, through the official
    ``kubernetes`` client's ``CustomObjectsApi``. Only the verbs the chart's Role grants Dagster are
    used (create, get, watch, delete), nothing cluster-wide.

    ``api``: a ``kubernetes.client.CustomObjectsApi``; by default one built from the in-cluster
    service account, else the local kubeconfig.
    """

    def __init__(self, namespace: str, api: Any | None = None):
        self.namespace = namespace
        self._api = api

    @property
    def api(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._api = client.CustomObjectsApi()
        return self._api

    def create(self, app: Mapping[str, Any]) -> dict:
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, dict(app))

    def get(self, name: str) -> dict | None:
        """The application, or None if it does not exist (HTTP 404)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, name: str) -> bool:
        """Stop a version's query by deleting its application (the operator deletes the pods).
        Returns False if it did not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def outcome(self, name: str, *, streaming: bool = True) -> Outcome | None:
        """:func:`outcome_of` the named application; None if it does not exist."""
        app = self.get(name)
        return None if app is None else outcome_of(app, streaming=streaming)

    def watch(self, name: str, timeout_s: int = 60) -> Iterable[Outcome]:
        """Yield the outcome of the named application each time the operator changes it, for at most
        ``timeout_s`` seconds (a ``watch`` request filtered to that one object)."""
        from kubernetes import watch

        w = watch.Watch()
        for event in w.stream(
            self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
            field_selector=f"metadata.name={name}", timeout_seconds=timeout_s,
        ):
            yield outcome_of(event["object"])


# ------------------------------------------------------------------------------------- runner


@dataclass(frozen=True)
class AppStatus:
    """What the runner saw of one asset version's SparkApplication.

    ``outcome`` is None when the application does not exist; ``state`` is the operator's raw
    ``applicationState.state`` ("" before the operator set one); ``error`` is
    :func:`error_message` (empty unless failed); ``created`` says whether this call created it."""

    asset: str
    version: int
    name: str
    namespace: str
    outcome: Outcome | None
    state: str = ""
    error: str = ""
    created: bool = False


class KubernetesRunner:
    """Start, observe and stop asset versions as SparkApplications (one per version).

    ``start`` is idempotent: an existing application of the version is observed, never replaced
    (its checkpoint is the version's; a second query on it must never run). Waiting polls ``get``
    every ``poll_s`` seconds (the chart's Role grants get; a poll needs no list permission) for at
    most ``timeout_s`` seconds: the operator submits within seconds, but pulling the image onto a
    fresh node can take a minute or two, hence the 120 s default.

    Example::

        runner = KubernetesRunner(cfg)
        status = runner.start(catalog["departures_hourly"], 2, upstream={"flights": 2})
        status.outcome  # Outcome.RUNNING, or PENDING if still starting after 120 s
        runner.stop("departures_hourly", 1)
    """

    def __init__(
        self,
        cfg: KubernetesRunnerConfig,
        apps: SparkApplications | None = None,
        *,
        poll_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.cfg = cfg
        self.apps = apps or SparkApplications(cfg.namespace)
        self.poll_s, self._clock, self._sleep = poll_s, clock, sleep

    def _status(self, asset: str, version: int, app: Mapping[str, Any] | None, created: bool = False) -> AppStatus:
        outcome = None if app is None else outcome_of(app)
        return AppStatus(
            asset=asset, version=version, name=application_name(asset, version), namespace=self.apps.namespace,
            outcome=outcome, state=state_of(app) if app is not None else "",
            error=error_message(app) if outcome in (Outcome.FAILED, Outcome.RETRYING, Outcome.UNKNOWN) else "",
            created=created,
        )

    def status(self, asset: str, version: int) -> AppStatus:
        """The version's application as it is now (``outcome`` None if there is none)."""
        return self._status(asset, version, self.apps.get(application_name(asset, version)))

    def outcome(self, asset: str, version: int) -> Outcome | None:
        return self.status(asset, version).outcome

    def start(
        self, spec: AssetSpec, version: int, upstream: Mapping[str, int] | None = None, timeout_s: float = 120.0,
    ) -> AppStatus:
        """Create the version's SparkApplication unless it exists, then wait until it is RUNNING or
        terminal (FAILED, SUCCEEDED) or ``timeout_s`` passed; returns the last status seen.
        ``upstream``: the upstream versions of an asset-sourced asset (required for those).
        Raises ``ValueError`` for missing upstream versions, ``ApiException`` for API errors other
        than a creation race (409)."""
        from kubernetes.client.exceptions import ApiException

        if spec.upstream and upstream is None:
            raise ValueError(f"{spec.name} reads {sorted(spec.upstream)}: pass their versions as upstream")
        name = application_name(spec.name, version)
        app = self.apps.get(name)
        created = False
        if app is None:
            body = build_spark_application(spec, version, self.cfg, upstream)
            try:
                app = self.apps.create(body)
                created = True
            except ApiException as exc:
                if exc.status != 409:  # 409: someone created it since our get; observe theirs
                    raise
                app = self.apps.get(name)
        deadline = self._clock() + timeout_s
        while True:
            status = self._status(spec.name, version, app, created)
            if status.outcome is None or status.outcome is Outcome.RUNNING or status.outcome.terminal:
                return status
            if self._clock() >= deadline:
                return status
            self._sleep(self.poll_s)
            app = self.apps.get(name)

    def stop(self, asset: str, version: int) -> bool:
        """Stop the version's query by deleting its application; False if there was none."""
        return self.apps.delete(application_name(asset, version))


@dataclass
class KubernetesReplay:
    """What :func:`replay` did. ``gates``: name -> passed, or None when no gate result exists."""

    versions: dict[str, int]
    started: dict[str, AppStatus]
    gates: dict[str, bool | None]
    promoted: bool
    stopped: list[str] = field(default_factory=list)
    reason: str = ""


def replay(
    settings: Any,
    asset: str,
    runner: KubernetesRunner,
    *,
    promote: bool = False,
    gate: Callable[[str, int], bool | None] | None = None,
    timeout_s: float = 120.0,
) -> KubernetesReplay:
    """Replay ``asset`` and its downstream chain on Kubernetes: check retention, create version N+1
    of every asset of the chain (as :func:`kappa.promotion.replay` does), start one
    SparkApplication per new version (downstream pinned to the new upstream versions), and, when
    ``promote`` is asked, every new application runs and every new version's gate passed, promote
    the chain in one registry commit and then stop (delete) every older version's application.

    ``gate(asset, version)`` says whether a version passed its gate (None: not evaluated). By
    default it is the gate result recorded in the registry (:func:`kappa.promotion.latest_gate`):
    this function never runs the gate itself, and a version without a recorded passing gate is
    never promoted. It does not wait for catch-up either (the query runs on the cluster).

    Raises :class:`kappa.promotion.RetentionError` before creating anything if the log is incomplete.
    """
    from kappa.promotion import begin_replay, latest_gate

    catalog = load_catalog(settings.assets_dir)
    chain, registry, versions = begin_replay(settings, asset)
    new = {name: v.version for name, v in versions.items()}
    started: dict[str, AppStatus] = {}
    for name in chain:
        status = runner.start(catalog[name], new[name], versions[name].upstream, timeout_s=timeout_s)
        started[name] = status
        if status.outcome is Outcome.RUNNING:
            registry.record(name, new[name], "running", mode="kubernetes", application=status.name)
        elif status.outcome is Outcome.FAILED:
            registry.record(name, new[name], "failed", error=status.error, application=status.name)

    events = registry.events()  # one read for every asset's recorded gate

    def recorded(name: str, version: int) -> bool | None:
        found = latest_gate(registry.version(name, version, events))
        return None if found is None else found[0]

    judge = gate or recorded
    gates = {name: judge(name, new[name]) for name in chain}
    report = KubernetesReplay(versions=new, started=started, gates=gates, promoted=False)
    not_running = [f"{s.name} is {s.outcome.value if s.outcome else 'missing'}" for s in started.values()
                   if s.outcome is not Outcome.RUNNING]
    ungated = [f"{n}/v{v}: {'gate not evaluated' if gates[n] is None else 'gate failed'}"
               for n, v in new.items() if gates[n] is not True]
    if not promote:
        report.reason = "promotion not asked"
        return report
    if not_running or ungated:
        report.reason = "not promoted: " + "; ".join(not_running + ungated)
        return report
    registry.promote(dict(new), reason="replay", chain=chain, gates={n: bool(g) for n, g in gates.items()})
    report.promoted = True
    # Only after the promotion commit: readers have moved to the new versions, so the old queries
    # can stop. Their tables and checkpoints stay (rollback restarts nothing by itself).
    for name in chain:
        for old in range(1, new[name]):  # versions are numbered 1..N without gaps
            if runner.stop(name, old):
                report.stopped.append(application_name(name, old))
    report.reason = "promoted"
    return report


# --------------------------------------------------------------------------- chart catalog generator


def chart_catalog(catalog: Catalog) -> dict:
    """The Helm chart's view of ``assets/``: every source topic with its Kafka config, and every
    streaming asset that reads Kafka with its KafkaUser name, topics and consumer-group prefix.

    Config values are strings (``"9223372036854775807"`` would lose precision as a YAML number in
    Helm, which parses numbers as float64). Assets that read only upstream tables need no KafkaUser.
    """
    topics = {
        name: {
            "partitions": t.partitions,
            "config": dict(sorted(t.kafka_config().items())),
            "description": t.description.strip(),
        }
        for name, t in sorted(catalog.topics.items())
    }
    assets = {
        spec.name: {
            "user": kafka_user_name(spec.name),
            "groupPrefix": group_prefix(spec.name),
            "topics": sorted(spec.topics),
        }
        for spec in sorted(catalog, key=lambda s: s.name)
        if spec.topics
    }
    return {"topics": topics, "assets": assets}


CATALOG_HEADER = """\
# GENERATED from assets/ by `make helm-catalog` (kappa.runners.kubernetes.chart_catalog); do not edit.
# The kappa chart reads this file (.Files.Get) to render one KafkaTopic per source topic and one
# least-privilege KafkaUser per streaming asset that reads Kafka. tests/helm checks it is up to date.
"""


def render_chart_catalog(assets_dir: Path) -> str:
    """The text of ``helm/kappa/catalog.yaml`` for the declarations in ``assets_dir``."""
    doc = chart_catalog(load_catalog(assets_dir))
    return CATALOG_HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def render_example_application(assets_dir: Path, asset: str, version: int = 1) -> str:
    """YAML of the example SparkApplication kept in ``k8s/`` (placeholder image and bucket)."""
    catalog = load_catalog(assets_dir)
    cfg = KubernetesRunnerConfig(
        image="registry.example.com/kappa/kappa:0.1.0",
        warehouse="s3a://kappa/warehouse",
        checkpoints="s3a://kappa/checkpoints",
        jars=(
            "local:///opt/kappa/jars/spark/delta-spark_4.1_2.13-4.4.0.jar",
            "local:///opt/kappa/jars/spark/spark-sql-kafka-0-10_2.13-4.1.3.jar",
        ),
    )
    app = build_spark_application(catalog[asset], version, cfg)
    header = (
        f"# Example: version {version} of the streaming asset `{asset}` as a SparkApplication, as the\n"
        "# kubernetes runner builds it (GENERATED by `make k8s-manifests`; do not edit). Replace the\n"
        "# image, the buckets and spark.jars (the runner lists the jars of the image) before applying.\n"
    )
    return header + yaml.safe_dump(app, sort_keys=False, width=100)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kappa.runners.kubernetes catalog ASSETS_DIR`` prints the chart catalog;
    ``… example ASSETS_DIR ASSET [VERSION]`` prints an example SparkApplication."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] == "catalog":
        sys.stdout.write(render_chart_catalog(Path(args[1])))
        return 0
    if len(args) >= 3 and args[0] == "example":
        sys.stdout.write(render_example_application(Path(args[1]), args[2], int(args[3]) if len(args) > 3 else 1))
        return 0
    sys.stderr.write("usage: python -m kappa.runners.kubernetes catalog ASSETS_DIR | example ASSETS_DIR ASSET [VERSION]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
