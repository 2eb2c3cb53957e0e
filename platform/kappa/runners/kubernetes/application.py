"""The SparkApplication of one asset version (a long-running streaming query) and of its gate (a
batch job running ``kappa gate ASSET VERSION``), as plain dicts ready for the API or YAML.

The Kubeflow Spark operator (``sparkoperator.k8s.io/v1beta2``) turns one into a driver pod and
executors. Everything about the version comes from its registry record
(:class:`~kappa.delta.registry.Version`: table path, checkpoint path, ``txnAppId``, upstream
versions), everything about where data lives and how to reach Kafka from
:class:`~kappa.config.Settings`, the Spark configuration from
:func:`kappa.streaming.session.spark_conf` (the local session's), and what runs where from
:class:`~kappa.runners.kubernetes.config.KubernetesRunnerConfig`.
"""

from __future__ import annotations

import base64
import posixpath
import secrets
from typing import Any

from kappa.config import Settings, aws_environment
from kappa.delta.registry import Version
from kappa.runners.kubernetes.config import KubernetesRunnerConfig, asset_resources
from kappa.runners.kubernetes.naming import (
    API_VERSION,
    COMPONENT,
    GATE_COMPONENT,
    KIND,
    LABEL_ASSET,
    LABEL_COMPONENT,
    LABEL_KAFKA_CLIENT,
    LABEL_OPERATOR_APP,
    LABEL_VERSION,
    NETWORKING_GROUP,
    NETWORKING_VERSION,
    AUTH_SECRET_KEY,
    application_name,
    auth_secret_name,
    dns_name,
    gate_application_name,
    group_prefix,
    kafka_user_name,
    peers_policy_name,
)
from kappa.spec import AssetSpec, Resources

#: The Spark entry points inside the Kappa image: two-line shims (see the Dockerfile) that run
#: ``python -m kappa.runners.entrypoint`` and the ``kappa`` command; ``mainApplicationFile`` must be a file.
ENTRYPOINT_FILE = "local:///opt/kappa/bin/entrypoint.py"
KAPPA_CLI_FILE = "local:///opt/kappa/bin/kappa_cli.py"
#: Where the Kafka cluster CA certificate (PEM) is mounted when ``KAPPA_KAFKA_SSL_TRUSTSTORE_LOCATION`` is unset.
KAFKA_CA_DIR = "/etc/kappa/kafka-ca"
#: The pod volume of the application's Spark RPC key Secret (driver and executors).
AUTH_VOLUME = "spark-auth"


def _auth_volume(application: str, nonce: str) -> dict:
    """The application's RPC key Secret (:func:`~kappa.runners.kubernetes.naming.auth_secret_name`)
    as a volume with its mount point: the key lands at :data:`kappa.streaming.session.AUTH_SECRET_FILE`,
    where ``spark.authenticate.secret.{driver,executor}.file`` point, readable by the owner and the
    pod's group (its ``fsGroup``, the Spark user's) only."""
    from kappa.streaming.session import AUTH_SECRET_FILE

    return {
        "name": AUTH_VOLUME,
        "secret": {"secretName": auth_secret_name(application, nonce), "defaultMode": 0o440,
                   "items": [{"key": AUTH_SECRET_KEY, "path": posixpath.basename(AUTH_SECRET_FILE)}]},
        "mountPath": posixpath.dirname(AUTH_SECRET_FILE),
    }


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
    # Read-only root: Spark and Kappa write only to /tmp, the image's work directory (both
    # emptyDirs, see _scratch) and Spark's local directories (emptyDirs Spark adds itself).
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
    }


def _scratch(cfg: KubernetesRunnerConfig) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): the size-limited emptyDirs every Spark pod writes to under its read-only
    root filesystem: ``/tmp`` (the JVM's and Python's temporary files) and ``cfg.work_dir`` (the
    image's working directory and ``KAPPA_HOME``)."""
    volumes = [
        {"name": "kappa-tmp", "emptyDir": {"sizeLimit": cfg.tmp_size_limit}},
        {"name": "kappa-work", "emptyDir": {"sizeLimit": cfg.work_size_limit}},
    ]
    mounts = [{"name": "kappa-tmp", "mountPath": "/tmp"}, {"name": "kappa-work", "mountPath": cfg.work_dir}]
    return volumes, mounts


def _secret_env(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


#: Container names Spark looks up in a pod template (``spark.kubernetes.{driver,executor}.
#: podTemplateContainerName``, which the operator sets to these).
TEMPLATE_CONTAINERS = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}


def _role(kind: str, res: Resources, labels: dict[str, str], env: list[dict], mounts: list[dict],
          volumes: list[dict], cfg: KubernetesRunnerConfig) -> dict:
    """The ``driver`` or ``executor`` block. Security contexts, environment (with Secret
    references), volumes and mounts go into the role's pod ``template``, not into the role's own
    ``podSecurityContext``/``securityContext``/``env``/``volumeMounts`` fields: the operator's
    controller passes only the template (as ``spark.kubernetes.*.podTemplateFile``) and plain
    settings to spark-submit; those other fields reach the pods only through its optional mutating
    webhook. Without the template, Pod Security ``restricted`` refused the driver pod (tried on
    kube-apiserver v1.34.4 with the operator v2.5.2 controller). Spark builds the pods on top of the
    template and keeps these fields (Spark "Pod Template" docs); it adds its cpu and memory to the
    container's ``resources`` and keeps the template's ``ephemeral-storage``."""
    scratch_volumes, scratch_mounts = _scratch(cfg)
    storage = {"ephemeral-storage": cfg.ephemeral_storage_request}
    container: dict[str, Any] = {
        "name": TEMPLATE_CONTAINERS[kind],
        "securityContext": _container_security_context(),
        "env": env,
        "volumeMounts": [*scratch_mounts, *mounts],
        "resources": {"requests": storage, "limits": {"ephemeral-storage": cfg.ephemeral_storage_limit}},
    }
    pod_spec: dict[str, Any] = {"securityContext": _pod_security_context(), "containers": [container],
                                "volumes": [*scratch_volumes, *volumes]}
    if kind == "executor":
        # Executors never call the API server (the driver creates and watches them): no token in
        # their pods. The driver keeps its own (it manages its executor pods).
        pod_spec["automountServiceAccountToken"] = False
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


def settings_env(settings: Settings) -> list[dict]:
    """The ``KAPPA_*`` settings every Kappa pod needs to see what the Dagster code location sees:
    warehouse, checkpoints (so the registry and the version's paths resolve to the same place)
    and the object store (and ``AWS_REGION`` when set); the query's tuning (shuffle partitions,
    the back-pressure bound the driver's :func:`~kappa.streaming.sources.read_source` applies).
    Values, not secrets."""
    env = [
        {"name": "KAPPA_RUNNER", "value": "kubernetes"},
        {"name": "KAPPA_WAREHOUSE", "value": str(settings.warehouse)},
        {"name": "KAPPA_CHECKPOINTS", "value": str(settings.checkpoints)},
        {"name": "KAPPA_S3_PATH_STYLE_ACCESS", "value": str(settings.s3_path_style_access).lower()},
        {"name": "KAPPA_SHUFFLE_PARTITIONS", "value": str(settings.shuffle_partitions)},
        {"name": "KAPPA_MAX_OFFSETS_PER_TRIGGER", "value": str(settings.max_offsets_per_trigger)},
    ]
    if settings.s3_endpoint:
        env.append({"name": "KAPPA_S3_ENDPOINT", "value": settings.s3_endpoint})
    # The chart's objectStore.region (kappa-config's AWS_REGION): the region S3A signs for.
    if region := aws_environment().get("AWS_REGION"):
        env.append({"name": "AWS_REGION", "value": region})
    return env


def kafka_env(spec: AssetSpec, version: int, settings: Settings, cfg: KubernetesRunnerConfig) -> tuple[list, list, list]:
    """(driver env, executor env, volumes) for an asset that reads Kafka: bootstrap servers and
    security from ``settings`` (the chart's TLS listener, SASL/SCRAM), the SASL JAAS line from the
    asset's own KafkaUser Secret (driver only: Spark passes ``kafka.*`` options to executors with
    the tasks), the cluster CA mounted where ``KAPPA_KAFKA_SSL_TRUSTSTORE_LOCATION`` points, and a
    consumer-group prefix inside the asset's ACL prefix."""
    env = [
        {"name": "KAPPA_BOOTSTRAP_SERVERS", "value": str(settings.bootstrap_servers)},
        {"name": "KAPPA_KAFKA_GROUP_ID_PREFIX", "value": f"{group_prefix(spec.name)}v{version}-"},
    ]
    volumes: list[dict] = []
    for key, value in (("SECURITY_PROTOCOL", settings.kafka_security_protocol),
                       ("SASL_MECHANISM", settings.kafka_sasl_mechanism),
                       ("SSL_TRUSTSTORE_TYPE", settings.kafka_ssl_truststore_type),
                       ("SSL_TRUSTSTORE_LOCATION", settings.kafka_ssl_truststore_location)):
        if value:
            env.append({"name": f"KAPPA_KAFKA_{key}", "value": value})
    driver = list(env)
    if "SASL" in (settings.kafka_security_protocol or "").upper():
        # Strimzi's user operator writes `password` and the ready-made `sasl.jaas.config`.
        driver.append(_secret_env("KAPPA_KAFKA_SASL_JAAS_CONFIG", kafka_user_name(spec.name), "sasl.jaas.config"))
    if settings.kafka_ssl_truststore_location:
        volumes.append({
            "name": "kafka-cluster-ca",
            "secret": {"secretName": f"{cfg.kafka_cluster}-cluster-ca-cert",
                       "items": [{"key": "ca.crt", "path": posixpath.basename(settings.kafka_ssl_truststore_location)}]},
            "mountPath": posixpath.dirname(settings.kafka_ssl_truststore_location),
        })
    return driver, env, volumes


def _application(
    name: str, labels: dict[str, str], main_file: str, arguments: list[str], env: tuple[list, list],
    volumes: list[dict], spec: AssetSpec | None, settings: Settings, cfg: KubernetesRunnerConfig,
    restart: dict, driver_sa: str, auth_nonce: str | None,
) -> dict:
    from kappa.streaming.session import spark_conf

    volumes = [*volumes, _auth_volume(name, auth_nonce or secrets.token_hex(4))]
    res = asset_resources(spec) if spec is not None else None
    driver_res = (res.driver if res else None) or cfg.driver
    executor_res = (res.executor if res else None) or cfg.executor
    instances = (res.executor_instances if res else None) or cfg.executor_instances
    mounts = [{"name": v["name"], "mountPath": v["mountPath"], "readOnly": True} for v in volumes]
    pod_volumes = [{k: v for k, v in vol.items() if k != "mountPath"} for vol in volumes]
    driver = _role("driver", driver_res, labels, env[0], mounts, pod_volumes, cfg)
    driver["serviceAccount"] = driver_sa
    executor = _role("executor", executor_res, labels, env[1], mounts, pod_volumes, cfg)
    executor["instances"] = instances
    conf = spark_conf(settings, application=True, jars_dir=cfg.jars_dir)
    conf.update(cfg.spark_conf)
    app_spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "mainApplicationFile": main_file,
        "arguments": arguments,
        "sparkVersion": cfg.spark_version,
        "sparkConf": conf,
        "restartPolicy": restart,
        "driver": driver,
        "executor": executor,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels},
        "spec": app_spec,
    }


def _labels(asset: str, version: int, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kappa",
        "app.kubernetes.io/part-of": "kappa",
        LABEL_COMPONENT: component,
        LABEL_ASSET: dns_name(asset),
        LABEL_VERSION: str(version),
    }


def build_spark_application(
    spec: AssetSpec, version: Version, cfg: KubernetesRunnerConfig, settings: Settings, *,
    auth_nonce: str | None = None,
) -> dict:
    """The ``SparkApplication`` that runs ``version`` (the registry's record) of ``spec`` as a
    long-running streaming query with its processing-time trigger.

    The entrypoint's arguments are ``--asset NAME --version N`` plus ``--upstream NAME=N`` per
    upstream version the record pins; it reads the version's record from the registry and checks
    it against ``KAPPA_TABLE_PATH``, ``KAPPA_CHECKPOINT_PATH`` and ``KAPPA_TXN_APP_ID``, which this
    sets from the same record (so ``kubectl describe`` shows them). Driver and executor get
    :func:`settings_env`, the object-store keys as ``AWS_*`` from ``cfg.object_store_secret`` and,
    for an asset that reads Kafka, :func:`kafka_env`. Both mount the application's Spark RPC key
    Secret ``<application>-auth-<auth_nonce>`` (8 hex digits; random when None), which
    :func:`build_auth_secret` makes once the application exists.

    Raises ``ValueError`` for a version whose upstream record misses one of ``spec.upstream`` or
    whose name is too long for Kubernetes.
    """
    if version.version < 1:
        raise ValueError(f"version must be >= 1, got {version.version}")
    missing = sorted(set(spec.upstream) - set(version.upstream))
    if missing:
        raise ValueError(f"{spec.name} reads {missing}: its version record pins no upstream version for them")
    arguments = ["--asset", spec.name, "--version", str(version.version)]
    for up in sorted(spec.upstream):
        arguments += ["--upstream", f"{up}={int(version.upstream[up])}"]
    labels = _labels(spec.name, version.version, COMPONENT)
    if spec.topics:
        # The Kafka cluster's listener NetworkPolicy admits only pods carrying this label.
        labels[LABEL_KAFKA_CLIENT] = "true"
    common = [
        *settings_env(settings),
        {"name": "KAPPA_TABLE_PATH", "value": version.table_path},
        {"name": "KAPPA_CHECKPOINT_PATH", "value": version.checkpoint_path},
        {"name": "KAPPA_TXN_APP_ID", "value": version.txn_app_id},
        _secret_env("AWS_ACCESS_KEY_ID", cfg.object_store_secret, cfg.object_store_access_key_key),
        _secret_env("AWS_SECRET_ACCESS_KEY", cfg.object_store_secret, cfg.object_store_secret_key_key),
    ]
    driver_env, executor_env, volumes = list(common), list(common), []
    if spec.topics:
        k_driver, k_executor, volumes = kafka_env(spec, version.version, settings, cfg)
        driver_env += k_driver
        executor_env += k_executor
    restart = {
        "type": "OnFailure",
        "onFailureRetries": cfg.on_failure_retries,
        "onFailureRetryInterval": cfg.on_failure_retry_interval_s,
        "onSubmissionFailureRetries": cfg.on_submission_failure_retries,
        "onSubmissionFailureRetryInterval": cfg.on_submission_failure_retry_interval_s,
    }
    return _application(application_name(spec.name, version.version), labels, ENTRYPOINT_FILE, arguments,
                        (driver_env, executor_env), volumes, spec, settings, cfg, restart, cfg.service_account,
                        auth_nonce)


def build_gate_application(
    spec: AssetSpec, version: Version, cfg: KubernetesRunnerConfig, settings: Settings, *,
    auth_nonce: str | None = None,
) -> dict:
    """The batch ``SparkApplication`` that runs ``kappa gate ASSET VERSION`` from the image: the
    gate (GX suite, quarantine rate, shadow diff) over the version's table on the object store,
    recorded in the registry (``gate_passed`` / ``gate_failed``). It exits 1 when the gate fails,
    which the operator reports as FAILED; the registry says which. Never restarted: a gate is
    re-run by creating the application again. Its RPC key Secret as in :func:`build_spark_application`."""
    labels = _labels(spec.name, version.version, GATE_COMPONENT)
    env = [
        *settings_env(settings),
        _secret_env("AWS_ACCESS_KEY_ID", cfg.object_store_secret, cfg.object_store_access_key_key),
        _secret_env("AWS_SECRET_ACCESS_KEY", cfg.object_store_secret, cfg.object_store_secret_key_key),
    ]
    return _application(gate_application_name(spec.name, version.version), labels, KAPPA_CLI_FILE,
                        ["gate", spec.name, str(version.version)], (list(env), list(env)), [], spec, settings,
                        cfg, {"type": "Never"}, cfg.service_account, auth_nonce)


def auth_secret_of(app: dict) -> str:
    """The name of the RPC key Secret the SparkApplication ``app`` mounts (its driver template's
    :data:`AUTH_VOLUME`). Raises ``KeyError`` for an application without one."""
    for volume in app["spec"]["driver"]["template"]["spec"].get("volumes") or []:
        if volume.get("name") == AUTH_VOLUME:
            return volume["secret"]["secretName"]
    raise KeyError(f"SparkApplication {app['metadata']['name']} mounts no {AUTH_VOLUME} Secret")


def build_auth_secret(app: dict) -> dict:
    """The Secret with the Spark RPC key of the SparkApplication ``app`` (as the API server
    returned it: name, namespace, uid): 32 random bytes under the one key ``secret``, named as
    ``app`` mounts it (:func:`auth_secret_of`), owned by ``app`` (no ``blockOwnerDeletion``) so the
    garbage collector deletes it with the application. Spark reads it from the file in driver and
    executors (``spark.authenticate.secret.{driver,executor}.file``), so no pod spec carries it.
    The chart's admission admits exactly this shape from the run account. Raises ``KeyError`` for
    an ``app`` without ``metadata.uid`` or without the Secret's volume."""
    meta = app["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": auth_secret_of(app),
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"]}],
        },
        "data": {AUTH_SECRET_KEY: base64.b64encode(secrets.token_bytes(32)).decode("ascii")},
    }


def build_peers_policy(app: dict) -> dict:
    """The ``NetworkPolicy`` that lets the driver and executors of the SparkApplication ``app`` (as
    the API server returned it: name, namespace, uid) reach each other and nothing else of Spark:
    ingress from and egress to pods labelled ``sparkoperator.k8s.io/app-name: <app>`` (the operator
    labels both roles so). NetworkPolicies only ever add reachability; what else a Spark pod may
    reach (object store, Kafka, DNS, the API server) is the chart's per-kind policies. Owned by the
    application (``ownerReferences``, no ``blockOwnerDeletion``), so the garbage collector deletes it
    with the application. The chart's admission policy admits exactly this shape from the run
    account (helm/kappa/templates/022-ValidatingAdmissionPolicy-spark.yaml). Raises ``KeyError``
    for an ``app`` without ``metadata.uid`` (not yet created)."""
    meta = app["metadata"]
    name, uid = meta["name"], meta["uid"]
    def selector() -> dict:  # a fresh dict each time: the result shares no objects between its parts
        return {"matchLabels": {LABEL_OPERATOR_APP: name}}

    return {
        "apiVersion": f"{NETWORKING_GROUP}/{NETWORKING_VERSION}",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": peers_policy_name(name, uid),
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid}],
        },
        "spec": {
            "podSelector": selector(),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": selector()}]}],
            "egress": [{"to": [{"podSelector": selector()}]}],
        },
    }
