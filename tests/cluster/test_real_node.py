"""The real node (issue 43, item 2 so far): ``kappa cluster start`` with ``KAPPA_CLUSTER_NODE=real``
starts containerd and a kubelet beside the control plane; the node registers Ready with containerd
as its runtime, and a pod of the Kappa image runs in a container: as uid 185 on a read-only root
filesystem, with an address on the node's bridge, its log read back through the API server.

Marked ``cluster`` (`make test-cluster`: it needs `make image` and `make node-tools`)."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.services import cluster, node

pytestmark = [pytest.mark.cluster, pytest.mark.plane]

ROOT = Path(__file__).resolve().parents[2]


def _kernel_settings() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in node.KERNEL_SETTINGS}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    settings = load_settings(project_dir=ROOT, home=tmp_path_factory.mktemp("real-node"), cluster_node="real")
    before = _kernel_settings()
    try:
        st = cluster.start(settings, timeout_s=300)
        yield settings, st
    finally:
        cluster.stop(settings)
    # the kubelet changed the machine's kernel settings; stopping the node puts them back, and
    # leaves nothing mounted under its state
    assert _kernel_settings() == before
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if str(cluster.state_dir(settings)) in line]


@pytest.fixture(scope="module")
def core(plane):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(config_file=plane[1].kubeconfig))


def test_the_node_is_ready_with_containerd_as_its_runtime(plane):
    settings, st = plane
    again = cluster.status(settings)
    assert again.up and again.node["ready"] is True
    assert str(again.node["runtime"]).startswith("containerd://1.6.")
    assert again.node["kubelet"] == "v1.34.4"
    assert again.processes["containerd"] and again.processes["kubelet"]
    assert any(line.startswith(f"  node {node.NODE_NAME}: Ready, runtime containerd://") for line in again.summary())


def _pod(name: str, image: str, command: list[str]) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": node.NODE_NAME, "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "resources": {"limits": {"memory": "512Mi", "cpu": "1"}},
            }],
        },
    }


def _finished(core, name: str, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        if pod.status.phase in ("Succeeded", "Failed"):
            return pod
        time.sleep(1)
    raise AssertionError(f"pod {name} did not finish in {timeout_s:.0f} s: {pod.status}")


def test_a_pod_of_the_kappa_image_runs_in_a_container_as_uid_185_on_a_read_only_root(plane, core):
    _, st = plane
    image = cluster._kappa_images(plane[0])
    assert image, "the Kappa image is not in podman's store: `make image`"
    core.create_namespaced_pod("default", _pod("kappa-help", image[0], [
        "/bin/sh", "-c", "id -u; touch /probe 2>/dev/null && echo writable || echo read-only; kappa --help"]))
    pod = _finished(core, "kappa-help")
    state = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Succeeded" and state.exit_code == 0, state
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node.POD_CIDR)
    # the log through the API server, which reads it from the kubelet's API with its client certificate
    log = core.read_namespaced_pod_log("kappa-help", "default", _preload_content=False).data.decode().splitlines()
    assert log[:2] == ["185", "read-only"]
    assert any("replay-first streaming data platform" in line for line in log)


def _call(method: str, url: str, ca: Path, token: str | None, body: dict | None = None) -> int:
    import json
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(ca))
    if token is None:  # the kubelet's own serving certificate is self-signed: check nothing but the refusal
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    headers = {"Content-Type": "application/merge-patch+json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_node_s_identity_reaches_its_own_node_and_nothing_else(plane):
    """The kubelet's token (system:node:kappa-node-0): the Node authorizer and NodeRestriction admit
    its own Node and refuse Secrets it has no pod for and another node's object."""
    settings, st = plane
    d = cluster.state_dir(settings)
    ca = d / "pki" / "ca.crt"
    token = next(line.split(",")[0] for line in (d / "tokens.csv").read_text().splitlines()
                 if line.split(",")[1] == node.NODE_USER)
    assert _call("GET", f"{st.server}/api/v1/nodes/{node.NODE_NAME}", ca, token) == 200
    assert _call("GET", f"{st.server}/api/v1/namespaces/default/secrets", ca, token) == 403
    assert _call("GET", f"{st.server}/api/v1/namespaces/kube-system/secrets", ca, token) == 403
    assert _call("PATCH", f"{st.server}/api/v1/nodes/{cluster.NODE_NAME}", ca, token,
                 {"metadata": {"labels": {"taken": "over"}}}) == 403
    assert _call("PATCH", f"{st.server}/api/v1/nodes/{node.NODE_NAME}", ca, token,
                 {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}) == 403  # NodeRestriction


def test_the_kubelet_api_refuses_an_anonymous_request(plane):
    import yaml

    settings, _ = plane
    port = yaml.safe_load((node.node_dir(cluster.state_dir(settings)) / "kubelet.yaml").read_text())["port"]
    url = f"https://{node.node_ip()}:{port}/pods"
    assert _call("GET", url, cluster.state_dir(settings) / "pki" / "ca.crt", None) == 401
