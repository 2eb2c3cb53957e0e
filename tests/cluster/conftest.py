"""The real node's plane, one for the package (tests/cluster): ``kappa cluster start`` with
``KAPPA_CLUSTER_NODE=real`` (containerd, a kubelet, kube-proxy, CoreDNS, kube-router beside the
control plane), stopped when the package's tests end, leaving the machine as it found it."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.services import cluster, node

ROOT = Path(__file__).resolve().parents[2]


def _kernel_settings() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in node.KERNEL_SETTINGS}


@pytest.fixture(scope="package")
def plane(tmp_path_factory):
    settings = load_settings(project_dir=ROOT, home=tmp_path_factory.mktemp("real-node"), cluster_node="real")
    before = _kernel_settings()
    try:
        st = cluster.start(settings, timeout_s=300)
        yield settings, st
        _write_pods(settings, st)
    finally:
        cluster.stop(settings)
    # the kubelet changed the machine's kernel settings; stopping the node puts them back, and
    # leaves nothing mounted under its state
    assert _kernel_settings() == before
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if str(cluster.state_dir(settings)) in line]
    # nor a pod's end of the node's bridge: each had its namespace removed (a leftover's address would
    # answer for the next pod given it)
    bridge, deadline = Path("/sys/class/net/kappa0/brif"), time.monotonic() + 10
    while bridge.exists() and list(bridge.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not bridge.exists() or not list(bridge.iterdir())
    # nor kube-router's chains and sets (node.remove_firewall_rules at stop)
    assert not node.firewall_chains()
    assert not [s for s in subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True).stdout.split()
                if s.startswith(node.FIREWALL_SETS)]
    # the node's containerd root holds the imported images unpacked (~6 GB): not left in pytest's
    # kept temporary directories
    shutil.rmtree(node.node_dir(cluster.state_dir(settings)), ignore_errors=True)


#: Where the plane leaves its closing view of the pods; `make test-cluster` prints it last.
PODS = ROOT / ".kappa" / "test-artifacts" / "cluster-pods.txt"


def _write_pods(settings, st) -> None:
    """The pods the tests left, as ``kubectl get pods -A -o wide`` lists them plus each one's
    images and container ids (``containerd://…``), and the runtime's own view (``ctr containers
    list`` in containerd's ``k8s.io`` namespace), into :data:`PODS`."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=st.kubeconfig))
    rows = [("NAMESPACE", "NAME", "STATUS", "IP", "NODE", "RUNTIME", "IMAGES")]
    for pod in sorted(core.list_pod_for_all_namespaces().items, key=lambda p: (p.metadata.namespace, p.metadata.name)):
        statuses = pod.status.container_statuses or []
        runtime = ",".join(sorted({(c.container_id or "-").split("://")[0] for c in statuses})) or "-"
        rows.append((pod.metadata.namespace, pod.metadata.name, pod.status.phase, pod.status.pod_ip or "-",
                     pod.spec.node_name or "-", runtime, ",".join(c.image for c in pod.spec.containers)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    view = node.ctr(node.tools(settings, cluster.tools_dir(settings)), cluster.state_dir(settings),
                    "containers", "list", check=False).stdout
    PODS.parent.mkdir(parents=True, exist_ok=True)
    PODS.write_text("pods at the end of tests/cluster (kubectl get pods -A -o wide):\n" + "\n".join(lines)
                    + "\n\ncontainerd's view (ctr --namespace k8s.io containers list):\n" + view)


@pytest.fixture(scope="package")
def core(plane):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(config_file=plane[1].kubeconfig))


