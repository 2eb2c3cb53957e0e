"""``kappa replay ASSET --promote`` on the kubernetes runner ends with the new version promoted,
its gate results recorded in the registry, and the older version's application deleted: the same
replay -> gate -> promote as locally (kappa.promotion.replay), over a ``file://`` warehouse.

What is real: the broker, the registry (Delta through delta-rs), the CLI, the runner, the
SparkApplications it builds (validated against the operator's CRD schema), and the Spark drivers
they describe: the streaming query (``python -m kappa.runners.entrypoint``) and the gate
(``kappa gate``), each a real Spark process writing and reading the ``file://`` tables and
checkpoint. What is stood in for (tests/kube_api.py ``KubeletApi``): the API server, the Spark
operator's submission and the pods, which no container runtime can run here; the k8s-plane tests
run the same flow against a real kube-apiserver and operator. Catch-up is read from the new
version's checkpoint against the log end offsets taken when the replay started.
"""

from __future__ import annotations

import json

import jsonschema
from typer.testing import CliRunner

from kappa.cli import app
from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.runners.kubernetes.client import use_kubernetes_api
from kappa.spec import load_catalog
from tests.kube_api import KubeletApi

from ..conftest import REPO
from .helpers import ingest


def test_replay_with_promote_on_the_kubernetes_runner(make_env, tmp_path, monkeypatch):
    local, suffix = make_env()
    root = tmp_path / "cluster"
    env = {
        "KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(root / "home"), "KAPPA_ASSETS_DIR": str(local.assets_dir),
        "KAPPA_KAFKA_PORT": str(local.kafka_port), "KAPPA_KAFKA_CONTROLLER_PORT": str(local.kafka_controller_port),
        "KAPPA_WAREHOUSE": f"file://{root}/warehouse", "KAPPA_CHECKPOINTS": f"file://{root}/checkpoints",
        "KAPPA_RUNNER": "kubernetes", "KAPPA_K8S_IMAGE": "registry.example.com/kappa/kappa:test",
        "KAPPA_K8S_NAMESPACE": "kappa", "KAPPA_SPARK_DRIVER_MEMORY": "1g", "KAPPA_SHUFFLE_PARTITIONS": "2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert str(settings.warehouse).startswith("file://")
    ingest(settings, suffix, limit=200)
    # weather/v1 was started on the cluster earlier (its application runs; nothing promoted yet)
    Registry(settings).create_version("weather", load_catalog(settings.assets_dir)["weather"].fingerprint(), {})
    pod_env = {k: env[k] for k in ("KAPPA_PROJECT_DIR", "KAPPA_ASSETS_DIR", "KAPPA_SPARK_DRIVER_MEMORY")}
    api = KubeletApi({**pod_env, "KAPPA_HOME": str(root / "pod-home")}, tmp_path / "pods", adopt={"weather-v1"})
    try:
        with use_kubernetes_api(api):
            api.create_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", "kappa", "sparkapplications", {
                "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                "metadata": {"name": "weather-v1", "namespace": "kappa"}, "spec": {}})
            result = CliRunner().invoke(app, ["replay", "weather", "--promote"], catch_exceptions=False)
    finally:
        api.shutdown()
    logs = {n: api.log_tail(n, 40) for n in ("weather-v2", "weather-v2-gate")}
    assert result.exit_code == 0, f"{result.output}\n{json.dumps(logs, indent=1)}"
    assert "promoted" in result.output

    # the registry: v2 caught up (its rows are the log's weather records), gated on the cluster, promoted
    registry = Registry(settings)
    v2 = registry.version("weather", 2)
    assert v2.state == "promoted" and registry.promoted("weather").version == 2
    caught = v2.last("caught_up")
    assert caught["input_rows"] == 200 and caught["rows"] > 0
    assert caught["rows"] + caught["quarantined"] + caught["late_events"] == 200
    gate = v2.last("gate_passed")
    assert gate is not None and {c["name"] for c in gate["checks"]} >= {"quarantine_rate", "shadow_diff"}
    assert all(c["passed"] for c in gate["checks"] if c["blocking"])
    # paths and writer id: the registry's, passed to the application, never re-derived
    built = api.app("weather-v2")
    (container,) = built["spec"]["driver"]["template"]["spec"]["containers"]
    env_of = {e["name"]: e.get("value") for e in container["env"]}
    assert env_of["KAPPA_TABLE_PATH"] == v2.table_path == f"file://{root}/warehouse/weather/v2"
    assert env_of["KAPPA_CHECKPOINT_PATH"] == v2.checkpoint_path and env_of["KAPPA_TXN_APP_ID"] == v2.txn_app_id
    schema = json.loads((REPO / "build" / "tools" / "schemas" / "crds" / "sparkoperator.k8s.io"
                         / "sparkapplication_v1beta2.json").read_text())
    for name in ("weather-v2", "weather-v2-gate"):
        obj = api.app(name)
        jsonschema.Draft4Validator(schema).validate(
            {**{k: v for k, v in obj.items() if k != "status"},
             "metadata": {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}})
    # after the promotion commit the older version's application was deleted; the gate job ended
    assert "weather-v1" not in api.names()
    assert api.app("weather-v2-gate")["status"]["applicationState"]["state"] == "COMPLETED"
