"""A local Kubernetes control plane for tests and trials: real control-plane processes, and a real
node when asked (``KAPPA_CLUSTER_NODE=real``).

``kappa cluster start`` runs, each from a binary that ``make cluster-tools`` builds into
``build/tools/bin`` (versions in ``tools/versions.env``):

==========================  =====================================================================
process                     what it does here
==========================  =====================================================================
``kine``                    the etcd API on SQLite (``state.db``): the API server's store
``kube-apiserver``          HTTPS on ``127.0.0.1``; bearer-token authentication (one admin token in
                            ``system:masters``), RBAC authorization, the default admission plugins
                            (ServiceAccount, PodSecurity …), server-side schema validation of CRs
``kube-controller-manager`` each namespace's ``default`` service account, garbage collection,
                            the ``kube-root-ca.crt`` ConfigMap, node lifecycle
``kube-scheduler``          binds pods to nodes
``kwok``                    keeps the node ``kwok-node-0`` Ready (renews its Lease) and reports the
                            pods bound to it as Running (no container is started: nothing runs the
                            pod's command)
``spark-operator``          the Kubeflow Spark operator's controller, out of cluster; it submits
                            SparkApplications with ``spark-submit`` from the pyspark package
``containerd``, ``kubelet`` only with ``KAPPA_CLUSTER_NODE=real``: the real node ``kappa-node-0``,
                            whose pods run in containers (:mod:`kappa.services.node`)
==========================  =====================================================================

Every port is a free loopback port chosen at start. State lives under ``<KAPPA_HOME>/cluster``
(``.kappa/cluster`` by default): ``kubeconfig``, ``pki/``, ``state.db``, ``cluster.json`` (ports and
pids), and one ``<process>.log`` each. What this proves and what it cannot (no container runtime, so
no image is ever run): see the README's Kubernetes section.

Example::

    st = start(load_settings())        # ~20 s warm
    st.kubeconfig                       # .kappa/cluster/kubeconfig (KUBECONFIG=... kubectl get nodes)
    stop(load_settings())
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kappa.core import processes
from kappa.config import Settings
from kappa.services import node as real_node
from kappa.core.service import LocalService, ServiceStatus
from kappa.errors import KappaError

#: Start order; stop runs it backwards.
PROCESSES = ("kine", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "spark-operator")
NODE_NAME = "kwok-node-0"
#: kwok manages only nodes carrying this annotation (and the pods bound to them).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CIDR = "10.96.0.0/16"
ADMIN_USER = "kappa-admin"


class ClusterError(KappaError):
    """The local control plane cannot be started, reached or stopped; the message says why and what
    to do."""


@dataclass
class ClusterStatus(ServiceStatus):
    """``up``: every process alive and the API server ready. ``processes``: name -> pid (None if not
    running). ``server``: the API server's URL; ``kubeconfig``: a kubeconfig with the admin token."""

    up: bool
    server: str
    kubeconfig: str
    state_dir: str
    processes: dict[str, int | None] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    started_in_s: float | None = None
    #: The real node (``KAPPA_CLUSTER_NODE=real``): ``name``, ``ready``, ``runtime``, ``kubelet``;
    #: empty with kwok's node alone.
    node: dict[str, str | bool] = field(default_factory=dict)

    def summary(self) -> list[str]:
        """The API server, how to use its kubeconfig, and each process's pid (plain text)."""
        took = f" (started in {self.started_in_s} s)" if self.started_in_s is not None else ""
        lines = [f"at {self.server or '-'}{took}", f"export KUBECONFIG={self.kubeconfig}",
                 *(f"  {name:<24} {'pid ' + str(pid) if pid else 'not running'}" for name, pid in self.processes.items())]
        if self.node:
            n = self.node
            lines.append(f"  node {n['name']}: {'Ready' if n['ready'] else 'not Ready'}, runtime "
                         f"{n['runtime'] or '-'}, kubelet {n['kubelet'] or '-'}")
        return lines


# ------------------------------------------------------------------------------------- paths


def state_dir(settings: Settings) -> Path:
    """``<KAPPA_HOME>/cluster``: the control plane's state, logs and kubeconfig."""
    assert settings.home is not None
    return settings.home / "cluster"


def tools_dir(settings: Settings) -> Path:
    """Where ``make cluster-tools`` puts the binaries (``build/tools/bin`` of the project)."""
    return settings.project_dir / "build" / "tools" / "bin"


def _tool(settings: Settings, name: str) -> Path:
    path = tools_dir(settings) / name
    if not os.access(path, os.X_OK):
        raise ClusterError(f"{path} is missing: run `make cluster-tools` (builds the control plane with Go, once)")
    return path


def _spark_operator_dir(settings: Settings) -> Path:
    """The operator module's CRDs and chart, copied by ``make cluster-tools``."""
    found = sorted((settings.project_dir / "build" / "tools").glob("spark-operator-*/crds"))
    if not found:
        raise ClusterError("the Spark operator's CRDs are missing under build/tools: run `make cluster-tools`")
    return found[-1].parent


def spark_home() -> Path:
    """The pyspark package directory: it has ``bin/spark-submit``, which the operator runs."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# ------------------------------------------------------------------------------------- helpers


def _write_pki(pki: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, the API server's serving certificate (``127.0.0.1``, ``localhost``,
    ``kubernetes.default.svc``, the service IP and ``extra_ips``) signed by it, the API server's
    client certificate for kubelets, and the service-account signing key."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    pki.mkdir(parents=True, exist_ok=True)

    def key_pem(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kappa-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=365))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    srv_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sans = [x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.96.0.1", *extra_ips)]
    srv = (x509.CertificateBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
           .issuer_name(ca_name).public_key(srv_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
           .add_extension(x509.SubjectAlternativeName(sans), critical=False)
           .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
           .sign(ca_key, hashes.SHA256()))
    # The API server's client certificate for the kubelets' APIs (logs, exec): in system:masters, so
    # the kubelet's webhook authorization (a SubjectAccessReview) allows it.
    client_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client")]))
              .issuer_name(ca_name).public_key(client_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (pki / "ca.key").write_bytes(key_pem(ca_key))
    (pki / "apiserver.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    (pki / "apiserver.key").write_bytes(key_pem(srv_key))
    (pki / "apiserver-kubelet-client.crt").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (pki / "apiserver-kubelet-client.key").write_bytes(key_pem(client_key))
    (pki / "sa.key").write_bytes(key_pem(sa_key))
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def _kubeconfig(server: str, ca: Path, token: str) -> str:
    import base64

    import yaml

    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kappa-local",
        "clusters": [{"name": "kappa-local", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": "kappa-local", "context": {"cluster": "kappa-local", "user": ADMIN_USER}}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def _get(url: str, ca: Path, token: str, timeout: float = 2.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _delete(url: str, ca: Path, token: str, timeout: float = 10.0) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(url, method="DELETE", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _wait(what: str, check, timeout_s: float, procs: dict[str, subprocess.Popen], logs: Path) -> None:
    """Poll ``check()`` (every 0.2 s) until it is true; fail early, with the log's tail, if one of
    ``procs`` exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        for name, p in procs.items():
            if p.poll() is not None:
                raise ClusterError(f"{name} exited with status {p.returncode} while waiting for {what}; "
                                   f"its log ({logs / (name + '.log')}):\n{processes.log_tail(logs / (name + '.log'))}")
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}; logs in {logs}")
        time.sleep(0.2)


def _load_state(d: Path) -> dict:
    try:
        return json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}


def _processes(state: dict) -> tuple[str, ...]:
    """The processes of the plane as it was started: :data:`PROCESSES`, then the real node's."""
    return PROCESSES + (real_node.PROCESSES if state.get("node") == "real" else ())


# ------------------------------------------------------------------------------------- commands


def status(settings: Settings) -> ClusterStatus:
    """What runs now, from ``cluster.json`` and the processes' liveness, and whether the API server
    answers ``/readyz``."""
    d = state_dir(settings)
    state = _load_state(d)
    pids = {name: (pid if processes.pid_alive(pid) else None) for name, pid in (state.get("pids") or {}).items()}
    server = state.get("server", "")
    names = _processes(state)
    up = bool(pids) and all(pids.get(n) for n in names)
    node: dict[str, str | bool] = {}
    if up:
        try:
            up = _get(f"{server}/readyz", d / "pki" / "ca.crt", state["token"])[0] == 200
            if up and state.get("node") == "real":
                node = _real_node(server, d / "pki" / "ca.crt", state["token"])
                up = bool(node["ready"])
        except (OSError, urllib.error.URLError, ssl.SSLError, KeyError, ValueError):
            up = False
    return ClusterStatus(up=up, server=server, kubeconfig=str(d / "kubeconfig"), state_dir=str(d),
                         processes={n: pids.get(n) for n in names}, ports=state.get("ports") or {},
                         started_in_s=state.get("started_in_s"), node=node)


def start(settings: Settings, timeout_s: float = 120.0) -> ClusterStatus:
    """Start the control plane (or return its status if it is already up) and wait until it serves:
    the API server is ready, the ``default`` namespace has its ``default`` service account, the kwok
    node is Ready and the Spark operator answers its readiness probe. The SparkApplication CRDs are
    applied before the operator starts (it watches them). With ``settings.cluster_node`` ``real``,
    then containerd and a kubelet (:mod:`kappa.services.node`), the pause image and the Kappa image
    (when podman holds it) imported, and the node ``kappa-node-0`` Ready.

    Raises :class:`ClusterError` naming the missing tool, the process that exited (with its log's
    tail) or the condition that timed out; whatever it started is stopped again then.
    """
    current = status(settings)
    if current.up:
        return current
    stop(settings)  # leftovers of a half-started or crashed plane
    t0 = time.monotonic()
    d = state_dir(settings)
    tools = {name: _tool(settings, name) for name in PROCESSES}
    real = settings.cluster_node == "real"
    node_tools = real_node.tools(settings, tools_dir(settings)) if real else {}
    crds = _spark_operator_dir(settings) / "crds"
    stages = sorted((settings.project_dir / "build" / "tools" / "kwok-stages").glob("*.yaml"))
    if not stages:
        raise ClusterError("kwok's stages are missing under build/tools/kwok-stages: run `make cluster-tools`")
    d.mkdir(parents=True, exist_ok=True)
    for old in ("state.db", "state.db-wal", "state.db-shm"):  # a fresh store each start
        (d / old).unlink(missing_ok=True)
    pki = d / "pki"
    node_ip = real_node.node_ip() if real else None
    _write_pki(pki, (node_ip,) if node_ip else ())
    token, node_token, proxy_token, dns_token, firewall_token = (os.urandom(16).hex() for _ in range(5))
    tokens = f"{token},{ADMIN_USER},{ADMIN_USER},system:masters\n"
    if real:  # the kubelet's identity: the Node authorizer and NodeRestriction hold it to its node
        tokens += f"{node_token},{real_node.NODE_USER},{real_node.NODE_USER},system:nodes\n"
        tokens += f"{proxy_token},{real_node.PROXY_USER},{real_node.PROXY_USER}\n"
        tokens += f"{dns_token},{real_node.DNS_USER},{real_node.DNS_USER}\n"
        tokens += f"{firewall_token},{real_node.FIREWALL_USER},{real_node.FIREWALL_USER}\n"
    (d / "tokens.csv").write_text(tokens)
    ports = {name: processes.free_port() for name in ("kine", "apiserver", "kwok", "operator-health")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    kubeconfig = d / "kubeconfig"
    kubeconfig.write_text(_kubeconfig(server, pki / "ca.crt", token))
    kubeconfig.chmod(0o600)

    commands: dict[str, list[str]] = {
        "kine": [str(tools["kine"]), f"--endpoint=sqlite://{d / 'state.db'}?_journal=WAL&cache=shared&_busy_timeout=30000",
                 f"--listen-address=127.0.0.1:{ports['kine']}", "--metrics-bind-address=0"],
        "kube-apiserver": [
            str(tools["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{ports['kine']}",
            f"--secure-port={ports['apiserver']}",
            # Loopback alone with kwok's node: the "kubernetes" Service's endpoint would be 127.0.0.1,
            # which the API refuses, so there is none. With a real node, pods reach the API server
            # through that Service (kube-proxy) at the machine's address, where it then listens too.
            *(["--bind-address=0.0.0.0", f"--advertise-address={node_ip}"] if node_ip else
              ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]),
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            "--enable-admission-plugins=NodeRestriction",
            # to a kubelet's API (logs, exec) at its node's InternalIP (a node's Hostname address is
            # its name, which nothing here resolves)
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=false", "--profiling=false",
            "--enable-priority-and-fairness=false", "--watch-cache=false",
        ],
        "kube-controller-manager": [
            str(tools["kube-controller-manager"]), f"--kubeconfig={kubeconfig}", "--secure-port=0",
            "--leader-elect=false", f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false",
            # A node whose Lease was not renewed for this long is marked NotReady (default 50 s).
            # On two loaded cores a renewal through kine's SQLite store once came late enough to
            # flip kwok's node, and every pod on it, for 5 s; a slower verdict suits a test plane.
            "--node-monitor-grace-period=2m",
        ],
        "kube-scheduler": [str(tools["kube-scheduler"]), f"--kubeconfig={kubeconfig}", "--secure-port=0",
                           "--leader-elect=false", "--profiling=false"],
        "kwok": [
            str(tools["kwok"]), f"--kubeconfig={kubeconfig}", *(f"--config={p}" for p in stages),
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION[0]}={KWOK_NODE_ANNOTATION[1]}",
            "--cidr=10.0.0.1/24", "--node-ip=10.0.0.1",
            # The heartbeat stage updates the node's status only every ~10 min and expects the node's
            # Lease to be renewed meanwhile; without a lease the node-lifecycle controller marks the
            # node NotReady every grace period (~55 s) and with it every pod on it, which kwok does
            # not mark Ready again (a Deployment then never becomes available).
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{ports['kwok']}",
        ],
        "spark-operator": [
            str(tools["spark-operator"]), "controller", "start", "--leader-election=false",
            "--enable-ui-service=false", f"--health-probe-bind-address=127.0.0.1:{ports['operator-health']}",
            "--metrics-bind-address=0", "--pprof-bind-address=0", "--zap-log-level=info",
        ],
    }
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    operator_env = {
        **env,
        "SPARK_HOME": str(spark_home()),
        # The operator gives spark-submit `--master k8s://https://$KUBERNETES_SERVICE_HOST:$..._PORT`.
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(ports["apiserver"]),
    }
    state = {"server": server, "token": token, "ports": ports, "pids": {}, "node": settings.cluster_node}
    procs: dict[str, subprocess.Popen] = {}

    def launch(name: str) -> None:
        with open(d / f"{name}.log", "wb") as log:
            p = subprocess.Popen(commands[name], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=operator_env if name == "spark-operator" else env, cwd=d,
                                 start_new_session=True)
        procs[name] = p
        state["pids"][name] = p.pid
        (d / "cluster.json").write_text(json.dumps(state, indent=2))

    def apply_crds_and_node() -> None:
        """The Spark operator's CRDs (it watches them) and the kwok node, through the API."""
        import yaml
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(kubeconfig))
        ext = client.ApiextensionsV1Api(api)
        for path in sorted(crds.glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted(crds.glob("*.yaml"))]

        def established() -> bool:
            for name in names:
                conds = ext.read_custom_resource_definition(name).status.conditions or []
                if not any(c.type == "Established" and c.status == "True" for c in conds):
                    return False
            return True

        _wait("the Spark operator's CRDs to be established", established, 60, procs, d)
        client.CoreV1Api(api).create_node(yaml.safe_load(_node_manifest(real)))

    try:
        launch("kine")
        _wait("kine", lambda: socket.create_connection(("127.0.0.1", ports["kine"]), 0.5).close() or True,
              30, procs, d)
        launch("kube-apiserver")
        _wait("the API server's /readyz", lambda: _get(f"{server}/readyz", pki / "ca.crt", token)[0] == 200,
              timeout_s, procs, d)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            launch(name)
        apply_crds_and_node()
        launch("spark-operator")
        _wait("the default service account (kube-controller-manager)",
              lambda: _get(f"{server}/api/v1/namespaces/default/serviceaccounts/default", pki / "ca.crt", token)[0] == 200,
              timeout_s, procs, d)
        _wait(f"node {NODE_NAME} Ready (kwok)", lambda: _node_ready(server, pki / "ca.crt", token), timeout_s, procs, d)
        _wait("the Spark operator's readiness probe",
              lambda: urllib.request.urlopen(f"http://127.0.0.1:{ports['operator-health']}/readyz", timeout=1).status == 200,
              timeout_s, procs, d)
        if real:
            commands.update(real_node.prepare(settings, d, server=server, ca=pki / "ca.crt", token=node_token,
                                              proxy_token=proxy_token, dns_token=dns_token,
                                              firewall_token=firewall_token, service_cidr=SERVICE_CIDR,
                                              tools_=node_tools))
            launch("containerd")
            _wait("containerd", lambda: real_node.containerd_ready(node_tools, d), timeout_s, procs, d)
            real_node.import_images(settings, d, node_tools, images=_kappa_images(settings))
            real_node.save_kernel_settings(d)
            launch("kubelet")
            launch("kube-proxy")
            _apply_rbac(kubeconfig, real_node.dns_rbac(), real_node.firewall_rbac())
            launch("coredns")
            _wait(f"node {real_node.NODE_NAME} Ready (kubelet)",
                  lambda: _real_node(server, pki / "ca.crt", token)["ready"], timeout_s, procs, d)
            launch("kube-router")  # it looks its node up once, at start: after the kubelet registered it
    except BaseException:
        stop(settings)
        raise
    state["started_in_s"] = round(time.monotonic() - t0, 1)
    (d / "cluster.json").write_text(json.dumps(state, indent=2))
    return status(settings)


def _apply_rbac(kubeconfig: Path, *roles: tuple[dict, dict]) -> None:
    """ClusterRoles and their bindings (CoreDNS's and kube-router's: :func:`kappa.services.node.dns_rbac`,
    :func:`~kappa.services.node.firewall_rbac`), as the admin."""
    from kubernetes import client, config

    rbac = client.RbacAuthorizationV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    for role, binding in roles:
        rbac.create_cluster_role(role)
        rbac.create_cluster_role_binding(binding)


def _real_node(server: str, ca: Path, token: str) -> dict[str, str | bool]:
    """The real node's ``name``, ``ready``, ``runtime`` and ``kubelet`` (not ready, empty, before it
    has registered)."""
    code, body = _get(f"{server}/api/v1/nodes/{real_node.NODE_NAME}", ca, token)
    found = real_node.node_status(json.loads(body)) if code == 200 else {"ready": False, "runtime": "", "kubelet": ""}
    return {"name": real_node.NODE_NAME, **found}


def _kappa_images(settings: Settings) -> tuple[str, ...]:
    """The Kappa image as ``make image`` tags it by default (``localhost/kappa/kappa:<the chart's
    appVersion>``), when podman holds it: the real node imports it."""
    import re

    chart = (settings.project_dir / "helm" / "kappa" / "Chart.yaml").read_text()
    version = re.search(r'^appVersion: "?([^"\n]+)', chart, re.M)[1]
    image = f"localhost/kappa/kappa:{version}"
    podman = settings.project_dir / "tools" / "container" / "podman.sh"
    held = subprocess.run([str(podman), "image", "exists", image], capture_output=True, timeout=60).returncode == 0
    return (image,) if held else ()


def _node_manifest(real: bool = False) -> str:
    """kwok's node. Beside a real node (``real``) it is tainted ``kappa.dev/fake-node=kwok:NoSchedule``:
    the scheduler would otherwise prefer its 32 free CPUs, where a pod is reported Running and
    nothing runs."""
    import yaml

    key, value = KWOK_NODE_ANNOTATION
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": NODE_NAME, "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok"},
        },
        # Room for a few Spark drivers and executors (kwok reports it; nothing is reserved), and
        # local disk as a real node reports it: the chart requests ephemeral-storage, which a node
        # without it cannot schedule.
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "ephemeral-storage": "500Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "128Gi", "ephemeral-storage": "500Gi", "pods": "110"}},
    }
    if real:
        node["spec"] = {"taints": [{"key": "kappa.dev/fake-node", "value": "kwok", "effect": "NoSchedule"}]}
    return yaml.safe_dump(node)


def _node_ready(server: str, ca: Path, token: str) -> bool:
    code, body = _get(f"{server}/api/v1/nodes/{NODE_NAME}", ca, token)
    if code != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def stop(settings: Settings, timeout_s: float = 20.0) -> dict[str, int]:
    """Stop every process of the plane, newest first (SIGTERM, then SIGKILL after ``timeout_s``).
    Returns name -> pid of the processes it stopped; state (logs, kubeconfig) stays for reading."""
    d = state_dir(settings)
    state = _load_state(d)
    pids: dict[str, int] = state.get("pids") or {}
    stopped: dict[str, int] = {}
    if state.get("node") == "real" and processes.pid_alive(pids.get("kubelet")):
        # the kubelet removes its pods' sandboxes, mounts and addresses; stopped, it would leave them
        ca, server, token = d / "pki" / "ca.crt", state.get("server", ""), state.get("token", "")
        try:
            real_node.drain(lambda path: _get(f"{server}{path}", ca, token), lambda path: _delete(f"{server}{path}", ca, token))
        except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
            pass
    for name in reversed(_processes(state)):
        pid = pids.get(name)
        if name == "containerd" and processes.pid_alive(pid):
            try:  # what the drain left: a shim outlives containerd
                real_node.kill_leftovers(real_node.tools(settings, tools_dir(settings)), d)
            except (KappaError, OSError, subprocess.SubprocessError):
                pass
        if not processes.pid_alive(pid):
            continue
        # its own session: the operator's spark-submit children too
        processes.terminate(pid, timeout_s, group=True)
        stopped[name] = pid
        # their Service rules and firewall chains stay in the machine's iptables otherwise
        cleanup = {"kube-proxy": real_node.remove_proxy_rules, "kube-router": real_node.remove_firewall_rules}
        if name in cleanup:
            try:
                cleanup[name](real_node.tools(settings, tools_dir(settings)))
            except (KappaError, OSError, subprocess.SubprocessError):
                pass
    if state.get("node") == "real":
        try:
            real_node.restore_kernel_settings(d)
            real_node.release_mounts(d)
        except (OSError, subprocess.SubprocessError):
            pass
    if state:
        state["pids"] = {}
        (d / "cluster.json").write_text(json.dumps(state, indent=2))
    return stopped


class ClusterService(LocalService):
    """The test control plane as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "cluster", "control plane", 120.0
    help = ("The local Kubernetes control plane for tests: kine, kube-apiserver, kube-controller-manager, "
            "kube-scheduler, kwok (a fake node, no containers) and the Spark operator on free local ports "
            "(binaries from `make cluster-tools`); with KAPPA_CLUSTER_NODE=real also a real node, "
            "containerd and a kubelet (`make node-tools`).")
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)


SERVICE = ClusterService()
