"""The ``kubernetes`` runner: one streaming asset version runs as one long-running ``SparkApplication``
(Kubeflow Spark operator, ``sparkoperator.k8s.io/v1beta2``), its gate as one batch application.

One concern per module:

* :mod:`~kappa.runners.kubernetes.naming` — names of applications, KafkaUsers, consumer groups;
* :mod:`~kappa.runners.kubernetes.config` — the runner's own settings (``KAPPA_K8S_*``);
* :mod:`~kappa.runners.kubernetes.application` — the SparkApplication builders (the Spark
  configuration is the local session's, :func:`kappa.streaming.session.spark_conf`);
* :mod:`~kappa.runners.kubernetes.states` — operator states -> :class:`~kappa.runners.base.Outcome`;
* :mod:`~kappa.runners.kubernetes.client` — create/get/delete through the ``kubernetes`` client;
* :mod:`~kappa.runners.kubernetes.runner` — :class:`KubernetesRunner` (the :class:`~kappa.runners.base.Runner` protocol);
* :mod:`~kappa.runners.kubernetes.catalog` — the Helm chart's catalog and the example manifest.

None of them imports Dagster (Dagster code calls them) or reads the environment
(:mod:`kappa.config` does). The names below are re-exported for convenience.
"""

from kappa.runners.base import Outcome, RunStatus
from kappa.runners.kubernetes.application import (
    ENTRYPOINT_FILE,
    KAFKA_CA_DIR,
    KAPPA_CLI_FILE,
    build_gate_application,
    build_spark_application,
)
from kappa.runners.kubernetes.catalog import chart_catalog, example_version, render_chart_catalog
from kappa.runners.kubernetes.client import SparkApplications
from kappa.runners.kubernetes.config import KubernetesRunnerConfig
from kappa.runners.kubernetes.naming import LABEL_ASSET, LABEL_COMPONENT, LABEL_KAFKA_CLIENT, LABEL_VERSION
from kappa.runners.kubernetes.naming import application_name, dns_name, gate_application_name, group_prefix, kafka_user_name
from kappa.runners.kubernetes.runner import AppStatus, KubernetesRunner
from kappa.runners.kubernetes.states import STATE_OUTCOMES, error_message, outcome_of, state_of

__all__ = [
    "AppStatus", "ENTRYPOINT_FILE", "KAFKA_CA_DIR", "KAPPA_CLI_FILE", "KubernetesRunner", "KubernetesRunnerConfig",
    "LABEL_ASSET", "LABEL_COMPONENT", "LABEL_KAFKA_CLIENT", "LABEL_VERSION", "Outcome", "RunStatus",
    "STATE_OUTCOMES", "SparkApplications", "application_name", "build_gate_application", "build_spark_application",
    "chart_catalog", "dns_name", "error_message", "example_version", "gate_application_name", "group_prefix",
    "kafka_user_name", "outcome_of", "render_chart_catalog", "state_of",
]
