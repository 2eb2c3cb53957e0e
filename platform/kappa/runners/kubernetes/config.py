"""The kubernetes runner's own settings (``KAPPA_K8S_*``): what runs where, not where data lives.

Where data lives (warehouse, checkpoints, the registry, the object store's endpoint) and how to
reach Kafka (bootstrap servers, security) are :class:`kappa.config.Settings`, the same values the
local runner and the Dagster code location use; the SparkApplications get them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kappa.spec import AssetResources, AssetSpec, Resources
from kappa.streaming.session import IMAGE_JARS_DIR, IMAGE_WORK_DIR


#: A Kubernetes resource quantity such as ``512Mi``, ``8Gi`` or ``1G`` (Kubernetes API,
#: ``resource.Quantity``; decimal exponents are not accepted here).
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


class KubernetesRunnerConfig(BaseModel):
    """Everything the runner needs that is neither in the asset YAML nor in
    :class:`kappa.config.Settings`. The Helm chart's ``kappa-config`` ConfigMap carries the same
    values as ``KAPPA_K8S_*`` environment variables; the secrets are *names* of existing
    Kubernetes Secrets, never their contents.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "kappa"
    image: str
    image_pull_policy: str = "IfNotPresent"
    spark_version: str = "4.1.3"
    #: Driver service account (created by the spark-operator chart in the job namespace).
    service_account: str = "kappa-spark"
    #: The Strimzi Kafka cluster name; its CA certificate Secret is ``<cluster>-cluster-ca-cert``.
    kafka_cluster: str = "kappa"
    object_store_secret: str = "kappa-object-store"
    object_store_access_key_key: str = "AWS_ACCESS_KEY_ID"
    object_store_secret_key_key: str = "AWS_SECRET_ACCESS_KEY"
    #: The image's folder of Maven-resolved jars (Kafka source, Delta, hadoop-aws and its SDK, the
    #: log store), on the class path of every driver and executor as ``<folder>/*``
    #: (``spark.{driver,executor}.extraClassPath``): loaded where they are, nothing copied (the
    #: Dockerfile puts them there; a runner outside the image needs no list of them).
    jars_dir: str = IMAGE_JARS_DIR
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
    #: The image's writable work directory (its ``WORKDIR`` and ``KAPPA_HOME``, see the Dockerfile).
    #: Spark pods run with a read-only root filesystem; this and ``/tmp`` are their only writable
    #: paths besides Spark's own local directories (emptyDirs Spark adds, ``SPARK_LOCAL_DIRS``).
    work_dir: str = IMAGE_WORK_DIR
    #: ``sizeLimit`` of the emptyDirs at ``/tmp`` and at :attr:`work_dir` (Kubernetes quantities).
    tmp_size_limit: str = Field("2Gi", pattern=QUANTITY)
    work_size_limit: str = Field("512Mi", pattern=QUANTITY)
    #: ``ephemeral-storage`` request and limit of every driver and executor container: the
    #: emptyDirs above, Spark's local directories (shuffle files, the RocksDB state store's local
    #: copies) and the container's logs count against it; the kubelet evicts a pod above its limit
    #: (Kubernetes, "Local ephemeral storage").
    ephemeral_storage_request: str = Field("1Gi", pattern=QUANTITY)
    ephemeral_storage_limit: str = Field("8Gi", pattern=QUANTITY)
    #: Create each application's peers NetworkPolicy (its driver and executors reach each other, no
    #: other application's pods do); the chart sets it from ``networkPolicy.enabled``.
    network_policies: bool = True
    #: Extra ``sparkConf`` entries (win over :func:`kappa.streaming.session.spark_conf`).
    spark_conf: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_mapping(cls, values: Mapping[str, str], prefix: str = "KAPPA_K8S_") -> "KubernetesRunnerConfig":
        """A config from flat string settings such as the chart's ``kappa-config`` ConfigMap
        (``KAPPA_K8S_IMAGE``, ``KAPPA_K8S_DRIVER_MEMORY`` …); keys without ``prefix`` are ignored.
        The caller passes the mapping (``kappa.config`` reads the environment). Raises
        ``pydantic.ValidationError`` naming a bad or unknown key."""
        flat = {k[len(prefix):].lower(): v for k, v in values.items() if k.startswith(prefix)}
        fields: dict[str, Any] = {}
        for role in ("driver", "executor"):
            sub = {k[len(role) + 1:]: flat.pop(k) for k in list(flat) if k.startswith(f"{role}_") and k != "executor_instances"}
            if sub:
                fields[role] = Resources.model_validate(sub)
        if "spark_conf" in flat:
            fields["spark_conf"] = dict(
                kv.split("=", 1) for kv in flat.pop("spark_conf").split(",") if "=" in kv
            )
        fields.update(flat)
        return cls.model_validate(fields)


def asset_resources(spec: AssetSpec) -> AssetResources:
    """The asset's ``resources`` block (empty when the YAML declares none)."""
    return spec.resources or AssetResources()
