"""``kappa replay ASSET --promote`` on the kubernetes runner against the real control plane ends with
the new version promoted, its gate results recorded in the registry, and the older version's
SparkApplication deleted: the same replay -> gate -> promote as locally (kappa.lifecycle.promotion.replay),
over a ``file://`` warehouse and checkpoints.

What is real: the broker, the registry (Delta through delta-rs), the CLI, the runner, the
kube-apiserver (CRD schema validation of every SparkApplication, Pod Security ``restricted``
admission of every driver pod), the garbage collector, the scheduler binding the drivers to kwok's
node, and the Spark operator's controller submitting each application (spark-submit from pyspark)
and reporting its state from its driver pod's phase. The drivers' programs are real Spark processes:
v2's streaming query (``python -m kappa.runners.entrypoint``), which writes the ``file://`` table
and checkpoint that catch-up is read from, and the gate (``kappa gate weather 2``), which records
its checks in the registry.

What is stood in for (tests/kubernetes/kubelet.py ``KubeletWatcher``): the kubelet and the
container runtime. There is none here; the stand-in runs each driver pod's command as a local
process with the pod's plain environment and reports the pod's phase through the API, and stops
the process when its pod is deleted (shown at the end: deleting v2's application stops its query).
v1's driver pod is left to kwok (Running, no process): v1 only has to be there, running on the
cluster, to be replaced; running a second Spark query would add a minute to the suite and prove
nothing more about the replay.
"""

from __future__ import annotations

import os

from kubernetes import client
from typer.testing import CliRunner

from kappa.cli.app import app
from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.runners import pick_runner
from kappa.runners.kubernetes import SparkApplications, state_of
from kappa.runners.kubernetes.client import use_kubernetes_api
from kappa.kafka.topics import start_offsets
from kappa.spec import load_catalog
from tests.integration.helpers import ingest
from tests.kubernetes.kubelet import KubeletWatcher
from tests.kubernetes.plane import ROOT, wait_for

IMAGE = "registry.example.com/kappa/kappa:test"


def test_replay_with_promote_on_the_real_plane(make_env, tmp_path, monkeypatch, api_client, namespace):
    local, suffix = make_env()
    root = tmp_path / "cluster"
    for key in [k for k in os.environ if k.startswith("KAPPA_K8S_")]:
        monkeypatch.delenv(key)
    env = {
        "KAPPA_PROJECT_DIR": str(ROOT), "KAPPA_HOME": str(root / "home"), "KAPPA_ASSETS_DIR": str(local.assets_dir),
        "KAPPA_KAFKA_PORT": str(local.kafka_port), "KAPPA_KAFKA_CONTROLLER_PORT": str(local.kafka_controller_port),
        "KAPPA_WAREHOUSE": f"file://{root}/warehouse", "KAPPA_CHECKPOINTS": f"file://{root}/checkpoints",
        "KAPPA_RUNNER": "kubernetes", "KAPPA_K8S_IMAGE": IMAGE, "KAPPA_K8S_NAMESPACE": namespace,
        # a failed driver ends the run at once instead of being retried by the operator
        "KAPPA_K8S_ON_FAILURE_RETRIES": "0", "KAPPA_K8S_ON_SUBMISSION_FAILURE_RETRIES": "0",
        "KAPPA_SPARK_DRIVER_MEMORY": "1g", "KAPPA_SHUFFLE_PARTITIONS": "2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert str(settings.warehouse).startswith("file://")
    ingest(settings, suffix, limit=200)
    spec = load_catalog(settings.assets_dir)["weather"]
    apps = SparkApplications(namespace, client.CustomObjectsApi(api_client))
    core = client.CoreV1Api(api_client)
    # What the image's own environment gives the drivers (its /opt/kappa, assets, a home).
    image_env = {"KAPPA_PROJECT_DIR": str(ROOT), "KAPPA_ASSETS_DIR": str(local.assets_dir),
                 "KAPPA_HOME": str(root / "pod-home"), "KAPPA_SPARK_DRIVER_MEMORY": "1g"}
    kubelet = KubeletWatcher(api_client, namespace, tmp_path / "pods", ROOT, image_env, skip={"weather-v1-driver"})
    with use_kubernetes_api(apps.api), kubelet:
        # weather v1 runs on the cluster: created by the runner, submitted by the operator
        v1 = Registry(settings).create_version("weather", spec.fingerprint(), {},
                                               start_offsets=start_offsets(settings, spec.topics))
        started = pick_runner(settings).start(spec, v1)
        assert started.created and state_of(apps.get("weather-v1")) == "RUNNING", started
        result = CliRunner().invoke(app, ["replay", "weather", "--promote"], catch_exceptions=False)
        logs = {n: kubelet.log_tail(n) for n in ("weather-v2-driver", "weather-v2-gate-driver")}
        assert result.exit_code == 0, f"{result.output}\n{logs}\nkubelet: {kubelet.errors}"
        assert "promoted" in result.output
        # v1's application is deleted after the promotion commit; the garbage collector removes its pod
        assert apps.get("weather-v1") is None
        wait_for("weather-v1's driver pod deleted",
                 lambda: "weather-v1-driver" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                 timeout_s=60)
        v2_app, gate_app = apps.get("weather-v2"), apps.get("weather-v2-gate")
        v2_pod = core.read_namespaced_pod("weather-v2-driver", namespace)
        gate_pod = core.read_namespaced_pod("weather-v2-gate-driver", namespace)
        # the runner's stop of a version that runs a query: its application deleted, the garbage
        # collector deletes the driver pod, the (stand-in) kubelet stops the query's process
        query = kubelet.started["weather-v2-driver"]
        assert query.poll() is None, "v2's query should still be running after the promotion"
        assert pick_runner(settings).stop("weather", 2)
        wait_for("v2's query stopped after its application was deleted",
                 lambda: "weather-v2-driver" in kubelet.stopped and query.poll() is not None, timeout_s=120)
    assert not kubelet.errors, kubelet.errors

    # the registry: v2 caught up (its rows are the log's weather records), gated on the cluster, promoted
    registry = Registry(settings)
    v2 = registry.version("weather", 2)
    assert v2.state == "promoted" and registry.promoted("weather").version == 2
    assert registry.version("weather", 1).state != "promoted"
    caught = v2.last("caught_up")
    assert caught["input_rows"] == 200 and caught["rows"] > 0
    assert caught["rows"] + caught["quarantined"] + caught["late_events"] == 200
    gate = v2.last("gate_passed")
    assert gate is not None and {c["name"] for c in gate["checks"]} >= {"quarantine_rate", "shadow_diff"}
    assert all(c["passed"] for c in gate["checks"] if c["blocking"])

    # the real server accepted both applications (CRD schema) and the operator ran them: v2's query is
    # RUNNING, the gate job COMPLETED from its driver's exit 0
    assert state_of(v2_app) == "RUNNING" and v2_app["status"]["driverInfo"]["podName"] == "weather-v2-driver"
    assert state_of(gate_app) == "COMPLETED"
    # the driver pods were admitted under Pod Security restricted and bound to kwok's node
    enforced = core.read_namespace(namespace).metadata.labels["pod-security.kubernetes.io/enforce"]
    assert enforced == "restricted"
    for pod in (v2_pod, gate_pod):
        assert pod.spec.node_name == "kwok-node-0"
        assert pod.spec.security_context.run_as_non_root and pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert gate_pod.status.phase == "Succeeded"
    # what ran: v2's query and the gate, from the pods' own args; v1 only through kwok
    assert kubelet.started["weather-v2-driver"].args[-4:] == ["--asset", "weather", "--version", "2"]
    assert kubelet.started["weather-v2-gate-driver"].args[-4:] == ["kappa.cli", "gate", "weather", "2"]
    assert "weather-v1-driver" not in kubelet.started

    # paths and writer id: the registry's, reaching the driver pod through the server, never re-derived
    (container,) = [c for c in v2_pod.spec.containers if c.name == "spark-kubernetes-driver"]
    env_of = {e.name: e.value for e in container.env}
    assert env_of["KAPPA_TABLE_PATH"] == v2.table_path == f"file://{root}/warehouse/weather/v2"
    assert env_of["KAPPA_CHECKPOINT_PATH"] == v2.checkpoint_path and env_of["KAPPA_TXN_APP_ID"] == v2.txn_app_id
