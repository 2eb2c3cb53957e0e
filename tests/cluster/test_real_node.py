"""The real node (issue 43, item 2 so far): ``kappa cluster start`` with ``KAPPA_CLUSTER_NODE=real``
starts containerd and a kubelet beside the control plane; the node registers Ready with containerd
as its runtime, and a pod of the Kappa image runs in a container: as uid 185 on a read-only root
filesystem, with an address on the node's bridge, its log read back through the API server.

Marked ``cluster`` (`make test-cluster`: it needs `make image` and `make node-tools`)."""

from __future__ import annotations

import ipaddress
import shutil
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
    # nor a pod's end of the node's bridge: each had its namespace removed (a leftover's address would
    # answer for the next pod given it)
    bridge, deadline = Path("/sys/class/net/kappa0/brif"), time.monotonic() + 10
    while bridge.exists() and list(bridge.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not bridge.exists() or not list(bridge.iterdir())
    # the node's containerd root holds the imported images unpacked (~6 GB): not left in pytest's
    # kept temporary directories
    shutil.rmtree(node.node_dir(cluster.state_dir(settings)), ignore_errors=True)


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


def _pod(name: str, image: str, command: list[str], token: bool = False, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": node.NODE_NAME, "restartPolicy": "Never", "automountServiceAccountToken": token,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "resources": {"limits": {"memory": "512Mi", "cpu": "1"}},
            }],
        },
    }


def _log(core, name: str) -> list[str]:
    """The pod's log, or (when it has none: no container ran) its status and events, to fail with."""
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode().splitlines()
    except ApiException:
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
        return [str(core.read_namespaced_pod(name, "default").status), *(f"{e.reason}: {e.message}" for e in events)]


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
    log = _log(core, "kappa-help")
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


#: Python in the Kappa image: GET ``sys.argv[1]`` and print the status and the body on one line; with
#: ``token``, as the pod's service account (its projected token and the cluster's CA).
FETCH = """
import sys, ssl, time, urllib.request
url, sa = sys.argv[1], "/var/run/secrets/kubernetes.io/serviceaccount"
ctx, headers = None, {}
if url.startswith("https"):
    ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
    headers["Authorization"] = "Bearer " + open(sa + "/token").read()
for attempt in range(30):  # kube-proxy writes a new Service's rules within its sync period
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=ctx, timeout=10) as r:
            print(r.status, " ".join(r.read().decode().split())[:300])
            break
    except OSError as exc:
        print("attempt", attempt, "failed:", exc, file=sys.stderr)
        time.sleep(1)
else:
    sys.exit(1)
"""


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(plane, core):
    """kube-proxy leads 10.96.0.1:443 (the ``kubernetes`` Service, whose endpoint is the API server on
    the machine's address) to the API server; the pod authenticates with its service account."""
    image = cluster._kappa_images(plane[0])[0]
    core.create_namespaced_pod("default", _pod("api-client", image, [
        "python", "-c", FETCH, "https://10.96.0.1:443/version"], token=True))
    pod = _finished(core, "api-client")
    log = _log(core, "api-client")
    assert pod.status.phase == "Succeeded", log
    assert any(line.startswith("200 ") and '"gitVersion": "v1.34.4"' in line for line in log), log


def test_a_service_ip_and_its_name_lead_to_its_pod_on_the_node(plane, core):
    image = cluster._kappa_images(plane[0])[0]
    core.create_namespaced_pod("default", _pod("web", image, [
        "python", "-m", "http.server", "8080", "--directory", "/opt/kappa"], labels={"app": "web"}))
    service = core.create_namespaced_service("default", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    from kubernetes import client

    slices = client.DiscoveryV1Api(core.api_client)
    deadline, ready = time.monotonic() + 120, []
    while time.monotonic() < deadline and not ready:  # the pod's address Ready in the Service's slice
        ready = [a for e in slices.list_namespaced_endpoint_slice("default", label_selector="kubernetes.io/service-name=web").items
                 for ep in e.endpoints or [] if ep.conditions.ready for a in ep.addresses]
        time.sleep(0.5)
    web = core.read_namespaced_pod("web", "default")
    assert ready == [web.status.pod_ip], (ready, web.status)
    core.create_namespaced_pod("default", _pod("web-client", image, [
        "python", "-c", FETCH, f"http://{service.spec.cluster_ip}:80/"]))
    pod = _finished(core, "web-client")
    log = _log(core, "web-client")
    assert pod.status.phase == "Succeeded" and any(line.startswith("200 ") for line in log), log
    # by name: CoreDNS on the node answers for web.default.svc.cluster.local (the pod's search path
    # completes the short name) with the Service IP
    core.create_namespaced_pod("default", _pod("web-by-name", image, [
        "python", "-c", "import socket; print(socket.gethostbyname('web.default.svc.cluster.local'))\n" + FETCH,
        "http://web/"]))
    pod = _finished(core, "web-by-name")
    log = _log(core, "web-by-name")
    assert pod.status.phase == "Succeeded", log
    assert log[0] == service.spec.cluster_ip and any(line.startswith("200 ") for line in log), log
