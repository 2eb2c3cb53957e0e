"""``kappa replay ASSET --promote`` on the kubernetes runner against the real control plane ends with
the new version promoted, its gate results recorded in the registry, and the older version's
SparkApplication deleted: the same replay -> gate -> promote as locally, reading the start of the
log, which retention deleted from the broker, from the topic's archive on the object store (kappa.lifecycle.promotion.replay),
with the warehouse, checkpoints and registry on an S3-compatible object store (versitygw,
``kappa objectstore``), as on a cluster. Then ``kappa rollback`` runs the rolled-back-to version
again: its application is created anew, its query resumes from its checkpoint on the store, and
records published after the rollback arrive in its table (issue 20 item 4).

What is real: the broker, the object store, the registry (Delta through delta-rs), the CLI, the
runner, the kube-apiserver (CRD schema validation of every SparkApplication, Pod Security
``restricted`` admission of every driver pod), the garbage collector, the scheduler binding the
drivers to kwok's node, and the Spark operator's controller submitting each application (spark-submit
from pyspark) and reporting its state from its driver pod's phase. The drivers' programs are real
Spark processes: v1's and v2's streaming queries (``python -m kappa.runners.entrypoint``), which
write the ``s3a://`` tables and checkpoints that catch-up is read from, and the gate (``kappa gate
weather 2``), which records its checks in the registry.

What is stood in for (tests/kubernetes/kubelet.py ``KubeletWatcher``): the kubelet and the
container runtime. There is none here; the stand-in runs each driver pod's command as a local
process with the pod's plain environment, under the container's read-only root filesystem (a
read-only view of this machine with a fresh /tmp and a writable work directory, from the pod's
emptyDirs), reports the pod's phase through the API, and stops
the process when its pod is deleted (deleting v1's application after the promotion stops its
query; deleting v2's at the end stops v2's). The object-store keys, which a pod gets from the
chart's Secret, are given to the stand-in as the image's environment.
"""

from __future__ import annotations

import os

import pytest
from deltalake.exceptions import TableNotFoundError
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
from kappa.delta.tables import dataset
from kappa.lifecycle.promotion import commit_promotion
from tests.integration.helpers import data_docs_validation, ingest, object_store
from tests.kubernetes.kubelet import KubeletWatcher
from tests.kubernetes.plane import ROOT, wait_for

# the driver pods' commands run as local processes: Spark, on the object store
pytestmark = [pytest.mark.objectstore, pytest.mark.spark]

IMAGE = "registry.example.com/kappa/kappa:test"


def rows(settings, version: int) -> tuple[int, int]:
    """(rows, distinct event ids) of weather ``version``'s table on the object store (delta-rs)."""
    path = Registry(settings).version("weather", version).table_path
    try:
        ids = dataset(path, settings).to_table(columns=["event_id"]).column("event_id").to_pylist()
    except TableNotFoundError:  # no commit yet
        return 0, 0
    return len(ids), len(set(ids))


def _archive_then_delete_the_log_start(settings, topic: str) -> dict[int, int]:
    """Write every record of ``topic`` (raw bytes, coordinates, broker timestamps) as version 1 of
    its archive asset, weather_bronze, on the object store (delta-rs), then let retention delete the
    start of the log (short retention and segments until a partition's log start moves, then
    forever again). Returns partition -> log start offset."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from kappa.core.storage import delta_rs_options, delta_rs_uri
    from kappa.kafka.topics import alter_topic_config, offsets, records_at

    bronze = load_catalog(settings.assets_dir)["weather_bronze"]
    archive = Registry(settings).create_version("weather_bronze", bronze.fingerprint(), {},
                                                start_offsets=start_offsets(settings, [topic]))
    held = records_at(settings, [(topic, p.partition, o) for p in offsets(settings, [topic]) for o in range(p.start, p.end)])
    table = pa.table({"key": pa.array([r.key for r in held], pa.binary()),
                      "value": pa.array([r.value for r in held], pa.binary()),
                      "topic": pa.array([r.topic for r in held]),
                      "partition": pa.array([r.partition for r in held], pa.int32()),
                      "offset": pa.array([r.offset for r in held], pa.int64()),
                      "timestamp": pa.array([r.timestamp_ms * 1000 for r in held], pa.timestamp("us", tz="UTC"))})
    write_deltalake(delta_rs_uri(archive.table_path), table,
                    storage_options=delta_rs_options(archive.table_path, settings))
    alter_topic_config(settings, topic, {"retention.ms": "1000", "segment.ms": "100"})
    wait_for("retention deleted the start of the log", lambda: any(p.start > 0 for p in offsets(settings, [topic])),
             timeout_s=60)
    alter_topic_config(settings, topic, {"retention.ms": "-1"})
    return {p.partition: p.start for p in offsets(settings, [topic])}


def test_replay_with_promote_then_rollback_on_the_real_plane_and_the_object_store(
        make_env, tmp_path, monkeypatch, api_client, namespace):
    with object_store(tmp_path / "store", "plane") as (_base, store):
        _replay_then_rollback(make_env, tmp_path, monkeypatch, api_client, namespace, store["env"])


def _replay_then_rollback(make_env, tmp_path, monkeypatch, api_client, namespace, store_env):
    local, suffix = make_env()
    root = tmp_path / "cluster"
    for key in [k for k in os.environ if k.startswith(("KAPPA_K8S_", "AWS_"))]:
        monkeypatch.delenv(key)
    env = {
        **store_env,  # KAPPA_WAREHOUSE/CHECKPOINTS at s3a://plane/…, KAPPA_S3_ENDPOINT, AWS_*
        "KAPPA_PROJECT_DIR": str(ROOT), "KAPPA_HOME": str(root / "home"), "KAPPA_ASSETS_DIR": str(local.assets_dir),
        "KAPPA_KAFKA_PORT": str(local.kafka_port), "KAPPA_KAFKA_CONTROLLER_PORT": str(local.kafka_controller_port),
        "KAPPA_RUNNER": "kubernetes", "KAPPA_K8S_IMAGE": IMAGE, "KAPPA_K8S_NAMESPACE": namespace,
        # a failed driver ends the run at once instead of being retried by the operator
        "KAPPA_K8S_ON_FAILURE_RETRIES": "0", "KAPPA_K8S_ON_SUBMISSION_FAILURE_RETRIES": "0",
        "KAPPA_SPARK_DRIVER_MEMORY": "1g", "KAPPA_SHUFFLE_PARTITIONS": "2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert str(settings.warehouse) == "s3a://plane/warehouse" and str(settings.checkpoints) == "s3a://plane/checkpoints"
    ingest(settings, suffix, limit=200)
    spec = load_catalog(settings.assets_dir)["weather"]
    apps = SparkApplications(namespace, client.CustomObjectsApi(api_client))
    core = client.CoreV1Api(api_client)
    # What the image's own environment gives the drivers (its /opt/kappa, assets, a home), and the
    # object-store keys the chart's Secret would (the pods' env references it; nothing resolves it here).
    image_env = {"KAPPA_PROJECT_DIR": str(ROOT), "KAPPA_ASSETS_DIR": str(local.assets_dir),
                 "KAPPA_HOME": str(root / "pod-home"), "KAPPA_SPARK_DRIVER_MEMORY": "1g",
                 "AWS_ACCESS_KEY_ID": store_env["AWS_ACCESS_KEY_ID"],
                 "AWS_SECRET_ACCESS_KEY": store_env["AWS_SECRET_ACCESS_KEY"]}
    kubelet = KubeletWatcher(api_client, namespace, tmp_path / "pods", ROOT, image_env)
    with use_kubernetes_api(apps.api), kubelet:
        # weather v1 runs on the cluster: created by the runner, submitted by the operator
        v1 = Registry(settings).create_version("weather", spec.fingerprint(), {},
                                               start_offsets=start_offsets(settings, spec.topics))
        started = pick_runner(settings).start(spec, v1)
        assert started.created and state_of(apps.get("weather-v1")) == "RUNNING", started
        wait_for("weather v1's query caught up on the object store", lambda: rows(settings, 1)[0] > 0, timeout_s=300)
        # v1 is the promoted version the replay replaces (promoted directly: its gate is not this test's)
        commit_promotion(settings, {"weather": 1}, reason="manual")
        # The start of weather's log then exists only in its archive (issue 45): weather_bronze/v1 on
        # the object store, written here from the log with delta-rs, before retention deletes it
        # from the broker. v2, on the kubernetes runner, reads the archive below the log start.
        wait_for("weather v1 read the whole log", lambda: rows(settings, 1)[0] == 200, timeout_s=300)
        starts = _archive_then_delete_the_log_start(settings, spec.topics[0])
        result = CliRunner().invoke(app, ["replay", "weather", "--promote"], catch_exceptions=False)
        logs = {n: kubelet.log_tail(n) for n in ("weather-v1-driver", "weather-v2-driver", "weather-v2-gate-driver")}
        assert result.exit_code == 0, f"{result.output}\n{logs}\nkubelet: {kubelet.errors}"
        assert "promoted" in result.output
        parts = ", ".join(f"[{p}] 0-{s - 1}" for p, s in sorted(starts.items()) if s > 0)
        assert (f"weather/v2 reads {spec.topics[0]} {parts} from its archive weather_bronze/v1, the rest from Kafka"
                in " ".join(result.output.split())), result.output
        # v1's application is deleted after the promotion commit; the garbage collector removes its pod
        assert apps.get("weather-v1") is None
        wait_for("weather-v1's driver pod deleted",
                 lambda: "weather-v1-driver" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                 timeout_s=60)
        registry = Registry(settings)
        assert registry.version("weather", 2).state == "promoted" and registry.promoted("weather").version == 2
        assert registry.version("weather", 1).state != "promoted"
        v2_app, gate_app = apps.get("weather-v2"), apps.get("weather-v2-gate")
        v2_pod = core.read_namespaced_pod("weather-v2-driver", namespace)
        gate_pod = core.read_namespaced_pod("weather-v2-gate-driver", namespace)
        # the runner's stop of a version that runs a query: its application deleted, the garbage
        # collector deletes the driver pod, the (stand-in) kubelet stops the query's process
        # each application got its peers NetworkPolicy: the pods the operator labels as its own
        # (the driver pod shows the label), owned by the application
        net = client.NetworkingV1Api(api_client)
        peers = {}
        for app_obj, pod in ((v2_app, v2_pod), (gate_app, gate_pod)):
            name, uid = app_obj["metadata"]["name"], app_obj["metadata"]["uid"]
            policy = net.read_namespaced_network_policy(f"{name}-peers-{uid[:8]}", namespace)
            assert policy.spec.pod_selector.match_labels == {"sparkoperator.k8s.io/app-name": name}
            assert pod.metadata.labels["sparkoperator.k8s.io/app-name"] == name
            assert [(o.kind, o.name, o.uid) for o in policy.metadata.owner_references] == [("SparkApplication", name, uid)]
            peers[name] = policy.metadata.name
        query = kubelet.started["weather-v2-driver"]
        assert query.poll() is None, "v2's query should still be running after the promotion"
        assert pick_runner(settings).stop("weather", 2)
        # ... and the garbage collector deletes it with the application
        wait_for("weather-v2's peers NetworkPolicy deleted with its application",
                 lambda: peers["weather-v2"] not in {n.metadata.name for n in net.list_namespaced_network_policy(namespace).items},
                 timeout_s=60)
        wait_for("v2's query stopped after its application was deleted",
                 lambda: "weather-v2-driver" in kubelet.stopped and query.poll() is not None, timeout_s=120)
        v1_query = kubelet.started["weather-v1-driver"]
        assert "weather-v1-driver" in kubelet.stopped and v1_query.poll() is not None, "v1's query outlived its application"
        v1_rows = rows(settings, 1)

        # rollback: the stable name points at v1 again, and v1 runs again on the cluster, from its checkpoint
        rolled = CliRunner().invoke(app, ["rollback", "weather"], catch_exceptions=False)
        assert rolled.exit_code == 0, f"{rolled.output}\nkubelet: {kubelet.errors}"
        assert Registry(settings).promoted("weather").version == 1
        wait_for("v1's application running again after the rollback",
                 lambda: state_of(apps.get("weather-v1")) == "RUNNING" and kubelet.started.get("weather-v1-driver")
                 not in (None, v1_query), timeout_s=120)
        # records published after the rollback arrive in v1's table: the first 400 weather records
        # (the first 200 again, copies the query drops, and 200 new), each once
        ingest(settings, suffix, limit=400)
        wait_for("rows published after the rollback in v1's table", lambda: rows(settings, 1)[1] > v1_rows[1],
                 timeout_s=300)
        after = rows(settings, 1)
        logs = kubelet.log_tail("weather-v1-driver")
        assert after[0] == after[1] > v1_rows[1] == v1_rows[0], (v1_rows, after, logs)
        resumed = Registry(settings).version("weather", 1).last("running")
        assert resumed["reason"] == "rollback" and resumed["application"] == "weather-v1", resumed
        assert pick_runner(settings).stop("weather", 1)
    assert not kubelet.errors, kubelet.errors

    # the registry: v2 caught up (its rows are the log's weather records), gated on the cluster, was
    # promoted (above) and is rolled back from now
    registry = Registry(settings)
    v2 = registry.version("weather", 2)
    assert registry.promoted("weather").version == 1 and v2.state != "promoted"
    caught = v2.last("caught_up")
    assert caught["input_rows"] == 200 and caught["rows"] > 0
    assert caught["rows"] + caught["quarantined"] + caught["late_events"] == 200
    gate = v2.last("gate_passed")
    assert gate is not None and {c["name"] for c in gate["checks"]} >= {"quarantine_rate", "shadow_diff"}
    assert all(c["passed"] for c in gate["checks"] if c["blocking"])
    # GX's Data Docs outlive the gate's pod: copied from its scratch to the warehouse on the object
    # store, where v2's validation page shows every expectation of weather's suite
    assert gate["data_docs"] == "s3a://plane/warehouse/_kappa/data_docs/weather/v2/index.html"
    page = data_docs_validation(settings, gate["data_docs"], "weather_v2")
    for column in ("event_id", "event_time", "origin", "temp"):
        assert column in page, column
    assert "values must be unique" in page and "values must never be null" in page, page[:2000]

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
        # spark-submit kept the runner's template: a read-only root, emptyDirs at /tmp and the work
        # directory, an ephemeral-storage limit next to the cpu and memory Spark sets
        (ctr,) = [c for c in pod.spec.containers if c.name == "spark-kubernetes-driver"]
        assert ctr.security_context.read_only_root_filesystem is True
        assert {m.mount_path for m in ctr.volume_mounts} >= {"/tmp", "/opt/kappa/work"}
        assert ctr.resources.limits["ephemeral-storage"] == "8Gi" and "memory" in ctr.resources.limits
    # ... and every driver process ran under it (the stand-in's read-only root: kubelet.contained)
    assert kubelet.contained == {"weather-v1-driver": True, "weather-v2-driver": True, "weather-v2-gate-driver": True}
    assert gate_pod.status.phase == "Succeeded"
    # what ran: v2's query and the gate, from the pods' own args
    assert kubelet.started["weather-v2-driver"].args[-4:] == ["--asset", "weather", "--version", "2"]
    assert kubelet.started["weather-v2-gate-driver"].args[-4:] == ["kappa.cli", "gate", "weather", "2"]
    # v1 ran twice: before the replay, and again after the rollback (a new pod of the same name)
    assert [n for n, _ in kubelet.earlier] == ["weather-v1-driver"]
    assert kubelet.started["weather-v1-driver"].args[-4:] == ["--asset", "weather", "--version", "1"]

    # paths and writer id: the registry's, reaching the driver pod through the server, never re-derived
    (container,) = [c for c in v2_pod.spec.containers if c.name == "spark-kubernetes-driver"]
    env_of = {e.name: e.value for e in container.env}
    assert env_of["KAPPA_TABLE_PATH"] == v2.table_path == "s3a://plane/warehouse/weather/v2"
    assert env_of["KAPPA_CHECKPOINT_PATH"] == v2.checkpoint_path and env_of["KAPPA_TXN_APP_ID"] == v2.txn_app_id
