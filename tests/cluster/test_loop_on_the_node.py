"""The loop on the real node (issue 43, item 4): weather's streaming query runs as a SparkApplication
whose driver *and executor* pods run in containers on the node, in the chart's Pod Security
``restricted`` namespace under the chart's egress NetworkPolicies and the runner's peers policy;
an executor pod and then the driver pod are deleted while records arrive, and the table still
holds every record once (rows = distinct event ids = the log's records; one Delta commit per
transaction id). Then ``kappa replay weather --promote`` builds v2 on the cluster, gates it as its
own application and promotes it, and ``kappa rollback weather`` runs v1 again from its checkpoint.

What is real: the kubelet, containerd and runc running the Kappa image; the Spark operator's
controller (out of cluster, as `kappa cluster start` runs it) submitting each application;
Spark's Kubernetes scheduler backend in the driver pod creating its executor pods through the API
server (the chart's Role for the drivers' account); kube-proxy, CoreDNS and kube-router's
firewall on the node. What stands in: the broker and the object store are Kappa's local ones,
listening on the machine's address (``KAPPA_KAFKA_HOST``, ``KAPPA_OBJECTSTORE_HOST``) as a
cluster's external services would; Strimzi's operator is not available here, so one test-only
egress policy lets Kafka clients reach that broker where the chart's names the Strimzi pods.

Marked ``cluster`` (`make test-cluster`)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from kappa.config import load_settings
from kappa.services import cluster, node
from tests.kubernetes.plane import wait_for


def wait(what: str, check, timeout_s: float, detail=None):
    """Poll every 2 s (a table read from the object store each time)."""
    return wait_for(what, check, timeout_s, every_s=2.0, detail=detail)


pytestmark = [pytest.mark.cluster, pytest.mark.plane, pytest.mark.broker, pytest.mark.objectstore]

ROOT = Path(__file__).resolve().parents[2]
NS = "kappa-loop"
#: Where the test leaves every Spark pod it saw (role, node, runtime, how it ended); `make
#: test-cluster` prints it after the plane's closing view.
SPARK_PODS = ROOT / ".kappa" / "test-artifacts" / "cluster-spark-pods.txt"


class SparkPods:
    """Polls the namespace's Spark pods (label ``spark-role``) every second: each one's role, node,
    runtime, phase and whether it was deleted, for the closing record and the kill steps."""

    def __init__(self, core):
        self.core, self.seen, self.deleted = core, {}, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _poll(self):
        while not self._stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(NS, label_selector="spark-role").items
            except Exception:  # noqa: BLE001 - the server is busy; the next poll sees the pods
                pods = None
            if pods is not None:
                now = {}
                for p in pods:
                    statuses = p.status.container_statuses or []
                    now[p.metadata.uid] = {
                        "name": p.metadata.name, "role": p.metadata.labels.get("spark-role"),
                        "app": p.metadata.labels.get("sparkoperator.k8s.io/app-name", "-"),
                        "node": p.spec.node_name or "-", "phase": p.status.phase,
                        "runtime": ",".join(sorted({(c.container_id or "-").split("://")[0] for c in statuses})) or "-",
                        "image": p.spec.containers[0].image}
                for uid, row in self.seen.items():
                    if uid not in now:
                        self.deleted.add(uid)
                self.seen.update(now)
            self._stop.wait(1.0)

    def running(self, role: str, app: str) -> list[str]:
        """Names of ``app``'s live pods of ``role`` whose container runs."""
        pods = self.core.list_namespaced_pod(NS, label_selector=f"spark-role={role},sparkoperator.k8s.io/app-name={app}").items
        return [p.metadata.name for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

    def write(self) -> None:
        rows = [("POD", "ROLE", "APPLICATION", "NODE", "RUNTIME", "LAST PHASE", "END", "IMAGE")]
        for uid, r in sorted(self.seen.items(), key=lambda kv: kv[1]["name"]):
            rows.append((r["name"], r["role"], r["app"], r["node"], r["runtime"], r["phase"] or "-",
                         "deleted" if uid in self.deleted else "live", r["image"]))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        SPARK_PODS.parent.mkdir(parents=True, exist_ok=True)
        SPARK_PODS.write_text("Spark pods of the loop on the node (tests/cluster/test_loop_on_the_node.py):\n" + "\n".join(
            "  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1] for r in rows) + "\n")


def _chart_objects(values: dict, tmp: Path) -> list[dict]:
    """The chart's namespace, the drivers' Role and binding, and its NetworkPolicies (ingress and
    egress), rendered for namespace :data:`NS` with ``values``."""
    from tests.helm.helmtools import CHART, DEFAULT_VALUES, helm

    (tmp / "loop-values.yaml").write_text(yaml.safe_dump(values))
    out = helm("template", "kappa", str(CHART), "-n", NS, "-f", str(DEFAULT_VALUES), "-f", str(tmp / "loop-values.yaml"),
               "--set", "namespace.create=true",
               *[a for t in ("000-Namespace", "021-Role-spark-drivers", "050-NetworkPolicy", "051-NetworkPolicy-egress")
                 for a in ("--show-only", f"templates/{t}.yaml")]).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _weather(limit: int):
    from kappa.ingest.nycflights13 import load_events

    return [e for e in load_events(limit=limit) if e.topic == "weather"]


def test_the_loop_on_the_node_loses_and_duplicates_nothing_when_an_executor_and_a_driver_are_killed(
        plane, core, tmp_path, monkeypatch):
    from kubernetes import client
    from typer.testing import CliRunner

    from kappa.cli.app import app
    from kappa.core.processes import free_port
    from kappa.delta.registry import Registry
    from kappa.delta.tables import dataset
    from kappa.harness.delta_log import txn_commits
    from kappa.ingest.nycflights13 import publish
    from kappa.kafka import broker
    from kappa.kafka.topics import start_offsets
    from kappa.lifecycle.promotion import commit_promotion
    from kappa.runners import pick_runner
    from kappa.runners.kubernetes import SparkApplications, state_of
    from kappa.runners.kubernetes.client import use_kubernetes_api
    from kappa.services import objectstore
    from kappa.spec import load_catalog

    settings0, st = plane
    ip, image = node.node_ip(), cluster._kappa_images(settings0)[0]
    started_at = time.monotonic()
    steps: list[tuple[str, float]] = []

    def step(name: str) -> None:
        steps.append((name, time.monotonic() - started_at))
        print(f"[{steps[-1][1]:6.0f} s] {name}", flush=True)

    services = load_settings(project_dir=ROOT, home=tmp_path / "services", kafka_host=ip, kafka_port=free_port(ip),
                             kafka_controller_port=free_port(), objectstore_host=ip, objectstore_port=free_port(ip))
    broker.start(services, timeout_s=120)
    objectstore.start(services)
    pods = SparkPods(core)
    try:
        store = objectstore.status(services).env
        for key in [k for k in os.environ if k.startswith(("KAPPA_", "AWS_"))]:
            monkeypatch.delenv(key)
        env = {
            **{k: v for k, v in store.items() if k.startswith(("KAPPA_WAREHOUSE", "KAPPA_CHECKPOINTS", "KAPPA_S3_", "AWS_"))},
            "KAPPA_PROJECT_DIR": str(ROOT), "KAPPA_HOME": str(tmp_path / "home"), "KUBECONFIG": str(st.kubeconfig),
            "KAPPA_KAFKA_HOST": ip, "KAPPA_KAFKA_PORT": str(services.kafka_port),
            "KAPPA_KAFKA_CONTROLLER_PORT": str(services.kafka_controller_port),
            "KAPPA_RUNNER": "kubernetes", "KAPPA_K8S_IMAGE": image, "KAPPA_K8S_IMAGE_PULL_POLICY": "Never",
            "KAPPA_K8S_NAMESPACE": NS,
            # a deleted driver pod is resubmitted by the operator within seconds, not minutes
            "KAPPA_K8S_ON_FAILURE_RETRIES": "3", "KAPPA_K8S_ON_FAILURE_RETRY_INTERVAL_S": "5",
            "KAPPA_K8S_ON_SUBMISSION_FAILURE_RETRIES": "1", "KAPPA_K8S_ON_SUBMISSION_FAILURE_RETRY_INTERVAL_S": "5",
            "KAPPA_K8S_DRIVER_MEMORY": "1g", "KAPPA_K8S_EXECUTOR_MEMORY": "1g",
            # the node has 2 CPUs: each pod asks for a fifth of one (Spark's cores stay 1)
            "KAPPA_K8S_SPARK_CONF": "spark.kubernetes.driver.request.cores=200m,spark.kubernetes.executor.request.cores=200m",
            "KAPPA_SHUFFLE_PARTITIONS": "2",
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = load_settings()
        assert settings.bootstrap_servers == f"{ip}:{services.kafka_port}"
        spec = load_catalog(settings.assets_dir)["weather"]
        apps = SparkApplications(NS, client.CustomObjectsApi(core.api_client))
        net = client.NetworkingV1Api(core.api_client)

        # the chart's namespace, drivers' Role and NetworkPolicies, its peers named for this machine
        here = [{"ipBlock": {"cidr": f"{ip}/32"}}]
        api_port = int(st.server.rsplit(":", 1)[1])
        objs = _chart_objects({"networkPolicy": {"egress": {
            "dnsPeers": here, "objectStorePeers": here, "objectStorePorts": [services.objectstore_port],
            "kubernetesApiPeers": [*here, {"ipBlock": {"cidr": "10.96.0.1/32"}}], "kubernetesApiPorts": [443, api_port],
            "dagsterDatabasePeers": [{"ipBlock": {"cidr": "198.51.100.20/32"}}]}}}, tmp_path)
        kubectl = [str(ROOT / "build" / "tools" / "bin" / "kubectl"), f"--kubeconfig={st.kubeconfig}"]
        # a stand-in for the chart's Kafka client egress (to Strimzi's broker pods): the broker on this machine
        objs.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                     "metadata": {"name": "loop-egress-stand-in-broker", "namespace": NS},
                     "spec": {"podSelector": {"matchLabels": {"kappa.dev/kafka-client": "true"}}, "policyTypes": ["Egress"],
                              "egress": [{"to": here, "ports": [{"protocol": "TCP", "port": services.kafka_port}]}]}})
        objs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kappa-spark", "namespace": NS}})
        applied = subprocess.run([*kubectl, "apply", "--server-side", "-f", "-"], input=yaml.safe_dump_all(objs),
                                 capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
        assert {o.metadata.name for o in net.list_namespaced_network_policy(NS).items} >= {
            "kappa-default-deny-egress", "kappa-egress-streaming-asset", "kappa-egress-spark-drivers"}
        core.create_namespaced_secret(NS, {"metadata": {"name": "kappa-object-store"}, "stringData": {
            "AWS_ACCESS_KEY_ID": store["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": store["AWS_SECRET_ACCESS_KEY"]}})
        step("namespace, Role, NetworkPolicies and keys applied")

        def rows(version: int) -> tuple[int, int]:
            path = Registry(settings).version("weather", version).table_path
            try:
                ids = dataset(path, settings).to_table(columns=["event_id"]).column("event_id").to_pylist()
            except Exception:  # noqa: BLE001 - no commit yet
                return 0, 0
            return len(ids), len(set(ids))

        def driver_log(app_name: str) -> str:
            try:
                return core.read_namespaced_pod_log(f"{app_name}-driver", NS, tail_lines=60)
            except Exception as exc:  # noqa: BLE001
                return f"(no log of {app_name}-driver: {exc})"

        publish(settings, _weather(200))
        with use_kubernetes_api(apps.api), pods:
            v1 = Registry(settings).create_version("weather", spec.fingerprint(), {},
                                                   start_offsets=start_offsets(settings, spec.topics))
            started = pick_runner(settings).start(spec, v1)
            assert started.created, started
            step("weather v1 created")
            wait("weather v1's executor pod running", lambda: pods.running("executor", "weather-v1"), 600,
                     detail=lambda: f"{apps.get('weather-v1')}\n{driver_log('weather-v1')}")
            step("v1's driver and executor pods running")
            wait("weather v1's first 200 rows", lambda: rows(1)[0] == 200, 600, detail=lambda: driver_log("weather-v1"))
            step("v1 caught up: 200 rows")

            # an executor killed while records arrive: the driver asks for a new one, the lost tasks run again
            (executor,) = pods.running("executor", "weather-v1")
            publish(settings, _weather(400))  # the first 200 again (copies silver drops) and 200 new
            core.delete_namespaced_pod(executor, NS, grace_period_seconds=0)
            step(f"executor {executor} deleted")
            wait("a new executor of weather v1", lambda: [e for e in pods.running("executor", "weather-v1") if e != executor],
                     600, detail=lambda: driver_log("weather-v1"))
            wait("400 rows after the executor's kill", lambda: rows(1)[0] >= 400, 600, detail=lambda: driver_log("weather-v1"))
            step("400 rows after the executor's kill")

            # the driver killed while records arrive: the operator submits the application again, the
            # query resumes from its checkpoint on the object store
            driver = core.read_namespaced_pod("weather-v1-driver", NS).metadata.uid
            publish(settings, _weather(600))
            core.delete_namespaced_pod("weather-v1-driver", NS, grace_period_seconds=0)
            step("driver weather-v1-driver deleted")
            wait("a new driver of weather v1", lambda: any(
                p.metadata.uid != driver and p.status.phase == "Running" for p in
                core.list_namespaced_pod(NS, label_selector="spark-role=driver,sparkoperator.k8s.io/app-name=weather-v1").items),
                600, detail=lambda: str(apps.get("weather-v1")))
            wait("600 rows after the driver's kill", lambda: rows(1)[0] >= 600, 900, detail=lambda: driver_log("weather-v1"))
            step("600 rows after the driver's kill")
            time.sleep(15)  # a late duplicate commit would land within a trigger or two
            assert rows(1) == (600, 600)
            commits = txn_commits(Registry(settings).version("weather", 1).table_path, settings)
            assert commits and max(commits.values()) == 1, commits

            # replay -> gate -> promote, on the cluster
            commit_promotion(settings, {"weather": 1}, reason="manual")
            result = CliRunner().invoke(app, ["replay", "weather", "--promote"], catch_exceptions=False)
            assert result.exit_code == 0, f"{result.output}\n{driver_log('weather-v2')}\n{driver_log('weather-v2-gate')}"
            assert Registry(settings).promoted("weather").version == 2
            step("kappa replay weather --promote: v2 promoted")
            assert rows(2) == (600, 600)
            assert state_of(apps.get("weather-v2-gate")) == "COMPLETED"
            gate = Registry(settings).version("weather", 2).last("gate_passed")
            assert gate is not None and all(c["passed"] for c in gate["checks"] if c["blocking"]), gate
            assert apps.get("weather-v1") is None  # stopped after the promotion

            # rollback: v1 runs again from its checkpoint and takes what arrives next
            rolled = CliRunner().invoke(app, ["rollback", "weather"], catch_exceptions=False)
            assert rolled.exit_code == 0, rolled.output
            assert Registry(settings).promoted("weather").version == 1
            publish(settings, _weather(800))
            wait("800 rows in v1 after the rollback", lambda: rows(1)[0] >= 800, 900, detail=lambda: driver_log("weather-v1"))
            step("kappa rollback weather: v1 running again, 800 rows")
            time.sleep(10)
            assert rows(1) == (800, 800)
            assert max(txn_commits(Registry(settings).version("weather", 1).table_path, settings).values()) == 1
            for version in (1, 2):
                pick_runner(settings).stop("weather", version)
        pods.write()
        spark = list(pods.seen.values())
        # every Spark pod ran on the real node in a container of the Kappa image
        assert {(p["node"], p["runtime"], p["image"]) for p in spark if p["runtime"] != "-"} == {
            (node.NODE_NAME, "containerd", image)}, spark
        executors = [p for p in spark if p["role"] == "executor"]
        assert len(executors) >= 3 and {p["app"] for p in executors} >= {"weather-v1", "weather-v2"}, executors
        print("\n".join(f"{t:6.0f} s  {n}" for n, t in steps))
    finally:
        pods.write()
        # the plane is the package's: leave it as found (the namespace's pods, SparkApplications and
        # NetworkPolicies gone, so kube-router's chains for them too)
        try:
            core.delete_namespace(NS)
            wait(f"namespace {NS} deleted", lambda: NS not in {n.metadata.name for n in core.list_namespace().items}, 300)
        finally:
            objectstore.stop(services)
            broker.stop(services, grace_s=20)
