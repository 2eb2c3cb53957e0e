"""The real node of the local cluster (``KAPPA_CLUSTER_NODE=real kappa cluster start``): containerd
and a kubelet beside the control plane of :mod:`kappa.services.cluster`, so a pod's containers run
from an image, as uid and with the limits its spec says.

==========================  =====================================================================
process / part              what it is here
==========================  =====================================================================
``containerd``              Debian's containerd 1.6 with runc 1.1 (``make node-tools`` installs
                            it), its own root, state and socket under the node's state dir
                            (``tools/node/containerd.toml``)
``kubelet``                 built from ``k8s.io/kubernetes`` like the control plane
                            (``tools/go/kubernetes/node/kubelet``); node ``kappa-node-0``,
                            authenticated by a token of ``system:node:kappa-node-0``
                            (``system:nodes``: the API server's Node authorizer and
                            NodeRestriction admission hold it to its own node and pods)
``kube-proxy``              from the same module (``tools/go/kubernetes/node/kube-proxy``),
                            iptables mode: Service IPs, among them ``kubernetes`` (10.96.0.1),
                            which leads pods to the API server on the machine's address
                            (``tools/node/kube-proxy.yaml``; user ``system:kube-proxy``)
``coredns``                 CoreDNS (``go install`` of its module): Service names, on the node's
                            address (the kubelet's ``clusterDNS``), as user ``kappa:coredns``
                            (``tools/node/Corefile``)
``kube-router``             kube-router's NetworkPolicy firewall only (``tools/go/kube-router``;
                            iptables + ipset on the bridged pod traffic), as user
                            ``kappa:kube-router`` (:func:`firewall_rbac`); its chains and sets
                            removed at stop (:func:`remove_firewall_rules`)
pod network                 CNI bridge ``kappa0`` with host-local IPAM on :data:`POD_CIDR`
                            (``tools/node/cni-bridge.conflist``; Debian's plugins)
images                      imported into containerd's ``k8s.io`` namespace, never pulled: the
                            pause image Kappa builds (``make node-tools``) and the Kappa image
                            (``make image``), when containerd does not hold that image id yet
==========================  =====================================================================

What the machine needs that a cloud node would not is in ``tools/node`` (one file per part, each
quirk with the reason).

State: ``<KAPPA_HOME>/cluster/node``. :func:`prepare` writes the configs and returns the commands
:func:`kappa.services.cluster.start` runs; :func:`import_images` fills containerd; :func:`drain`
removes the node's pods through the API (the kubelet tears their sandboxes and network down)
before :func:`kappa.services.cluster.stop` stops the kubelet and containerd.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import tarfile
import time
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError

NODE_NAME = "kappa-node-0"
#: The pods' addresses on the node's bridge.
POD_CIDR = "10.244.0.0/24"
#: Start order, after the control plane's (:data:`kappa.services.cluster.PROCESSES`).
PROCESSES = ("containerd", "kubelet", "kube-proxy", "coredns", "kube-router")
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
#: The user the node's kubelet authenticates as (``tokens.csv`` of the API server).
NODE_USER = f"system:node:{NODE_NAME}"
#: kube-proxy's user: Kubernetes' default RBAC binds it to ``system:node-proxier`` (read Services and
#: EndpointSlices, write Events), nothing else.
PROXY_USER = "system:kube-proxy"
#: CoreDNS's user, and what it may do (:func:`dns_rbac`): list and watch what Service names resolve to.
DNS_USER = "kappa:coredns"
#: kube-router's user, and what it may do (:func:`firewall_rbac`): read what NetworkPolicies select.
FIREWALL_USER = "kappa:kube-router"


class NodeError(KappaError):
    """The real node cannot be prepared or started; the message names what is missing and the
    command that provides it."""


def node_dir(cluster_dir: Path) -> Path:
    """``<cluster state dir>/node``: containerd's root and state, the kubelet's root, CNI state."""
    return cluster_dir / "node"


def config_dir(settings: Settings) -> Path:
    """``tools/node``: the node's config templates, one per part."""
    return settings.project_dir / "tools" / "node"


def images_dir(settings: Settings) -> Path:
    """``build/tools/node``: the pause image's archive (``make node-tools``)."""
    return settings.project_dir / "build" / "tools" / "node"


def socket(cluster_dir: Path) -> Path:
    """containerd's gRPC socket (the kubelet's container runtime endpoint)."""
    return node_dir(cluster_dir) / "containerd" / "containerd.sock"


def tools(settings: Settings, tools_dir: Path) -> dict[str, str]:
    """containerd, ctr, ipset, runc, the CNI bridge plugin, the kubelet, kube-proxy, CoreDNS and
    kube-router, checked. Raises
    :class:`NodeError` naming the first missing one and ``make node-tools``."""
    found = {"containerd": shutil.which("containerd"), "ctr": shutil.which("ctr"), "ipset": shutil.which("ipset"),
             **{name: str(tools_dir / name) if os.access(tools_dir / name, os.X_OK) else None
                for name in ("kubelet", "kube-proxy", "coredns", "kube-router")},
             "runc": RUNC if os.access(RUNC, os.X_OK) else None,
             "bridge": str(CNI_BIN / "bridge") if os.access(CNI_BIN / "bridge", os.X_OK) else None}
    for name, path in found.items():
        if path is None:
            raise NodeError(f"{name} is missing for the real node: run `make node-tools` "
                            "(containerd and the CNI plugins from Debian, the kubelet built with Go)")
    if not (images_dir(settings) / "pause.tar").is_file():
        raise NodeError(f"{images_dir(settings) / 'pause.tar'} is missing: run `make node-tools`")
    return found  # type: ignore[return-value]


def node_ip() -> str:
    """This machine's address on its default route (the kubelet's node IP: it refuses loopback).
    Raises :class:`NodeError` when the machine has no route off itself."""
    import socket as sockets

    with sockets.socket(sockets.AF_INET, sockets.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # TEST-NET-2; a UDP connect sends nothing, it picks a source
            ip = s.getsockname()[0]
        except OSError as exc:
            raise NodeError(f"no address for the node: this machine has no default route ({exc})") from None
    if ip.startswith("127."):
        raise NodeError("no address for the node: the default route's source is loopback")
    return ip


def _archive_image(archive: Path) -> str:
    """The name of the image in a ``podman save`` (docker-archive) ``archive``: its first RepoTag."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    return manifest[0]["RepoTags"][0]


def prepare(settings: Settings, cluster_dir: Path, *, server: str, ca: Path, token: str, proxy_token: str,
            dns_token: str, firewall_token: str, service_cidr: str, tools_: dict[str, str]) -> dict[str, list[str]]:
    """Render ``tools/node``'s templates into the node's state dir, write the kubeconfigs of the
    kubelet (the node's ``token``), kube-proxy (``proxy_token``), CoreDNS (``dns_token``) and
    kube-router (``firewall_token``) for ``server`` (trusting ``ca``) and return the commands of
    :data:`PROCESSES`; ``service_cidr`` is the API server's Service IP range. Ports are free ports
    chosen now (CoreDNS's is 53, on the node's address)."""
    from kappa.core import processes

    d = node_dir(cluster_dir)
    for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet/pki"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    values = {"state": str(d), "sandbox_image": _archive_image(images_dir(settings) / "pause.tar"),
              "pod_cidr": POD_CIDR, "ca": str(ca), "node_ip": node_ip(), "port": str(processes.free_port()),
              "healthz_port": str(processes.free_port()), "node_name": NODE_NAME,
              "proxy_healthz_port": str(processes.free_port()), "proxy_metrics_port": str(processes.free_port())}
    templates = config_dir(settings)
    for name, target in (("containerd.toml", d / "containerd.toml"),
                         ("cni-bridge.conflist", d / "cni" / "net.d" / "10-kappa.conflist"),
                         ("kubelet.yaml", d / "kubelet.yaml"), ("kube-proxy.yaml", d / "kube-proxy.yaml"),
                         ("Corefile", d / "Corefile")):
        target.write_text(string.Template((templates / name).read_text()).substitute(values))
    (d / "healthz-port").write_text(values["healthz_port"])
    import yaml

    for name, user, secret in (("kubelet", NODE_USER, token), ("kube-proxy", PROXY_USER, proxy_token),
                               ("coredns", DNS_USER, dns_token), ("kube-router", FIREWALL_USER, firewall_token)):
        kubeconfig = d / f"{name}.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "kappa-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": user, "user": {"token": secret}}],
            "contexts": [{"name": name, "context": {"cluster": "kappa-local", "user": user}}],
        }, sort_keys=False))
        kubeconfig.chmod(0o600)
    return {
        "containerd": [tools_["containerd"], "--config", str(d / "containerd.toml"), "--log-level", "warn"],
        "kubelet": [tools_["kubelet"], f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
                    f"--hostname-override={NODE_NAME}", f"--node-ip={values['node_ip']}",
                    f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet' / 'pki'}",
                    "--node-labels=kappa.io/node=real"],
        "kube-proxy": [tools_["kube-proxy"], f"--config={d / 'kube-proxy.yaml'}"],
        "coredns": [tools_["coredns"], "-conf", str(d / "Corefile")],
        "kube-router": firewall_command(tools_, d, service_cidr),
    }


def firewall_command(tools_: dict[str, str], d: Path, service_cidr: str) -> list[str]:
    """kube-router with its NetworkPolicy firewall only: no BGP routes (one node, one bridge) and no
    service proxy (kube-proxy's). It filters the bridged traffic of its node's pods (iptables chains
    and ipsets, re-synced every 30 s and on each change); traffic to ``service_cidr`` is left to
    kube-proxy."""
    from kappa.core import processes

    return [tools_["kube-router"], f"--kubeconfig={d / 'kube-router.kubeconfig'}", f"--hostname-override={NODE_NAME}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            f"--health-port={processes.free_port()}", "--metrics-port=0", "--iptables-sync-period=30s",
            f"--service-cluster-ip-range={service_cidr}"]


def firewall_rbac() -> tuple[dict, dict]:
    """The ClusterRole and ClusterRoleBinding of :data:`FIREWALL_USER`: get/list/watch of what a
    NetworkPolicy selects and is (pods, namespaces, nodes, NetworkPolicies) and of the Services,
    Endpoints and EndpointSlices kube-router's informers start with even with its firewall alone;
    no write of anything."""
    return _user_role(FIREWALL_USER, [
        {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]}])


#: The prefixes of kube-router's iptables chains and ipsets (its firewall's, v2.1.0).
FIREWALL_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
FIREWALL_SETS = ("KUBE-SRC-", "KUBE-DST-", "kube-router-")


def firewall_chains(rules: list[str] | None = None) -> list[str]:
    """kube-router's chains (:data:`FIREWALL_CHAINS`) among ``rules`` (``iptables -S`` lines; by
    default the machine's filter table now)."""
    if rules is None:
        rules = subprocess.run(["iptables", "-t", "filter", "-S"], capture_output=True, text=True,
                               timeout=60, check=True).stdout.splitlines()
    return [line.split()[1] for line in rules if line.startswith("-N ") and line.split()[1].startswith(FIREWALL_CHAINS)]


def remove_firewall_rules(tools_: dict[str, str]) -> list[str]:
    """Remove what a stopped kube-router's firewall left in the machine's filter table and ipsets:
    the jumps to its chains, the chains (:data:`FIREWALL_CHAINS`), then its sets
    (:data:`FIREWALL_SETS`, with ``tools_``'s ``ipset``). Written here because ``kube-router --cleanup-config`` (v2.1.0) reports
    success and leaves the chains, then panics in its service proxy's clean-up. Returns the chains
    removed."""
    import shlex

    def iptables(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["iptables", *args], capture_output=True, text=True, timeout=60)

    rules = iptables("-t", "filter", "-S").stdout.splitlines()
    chains = firewall_chains(rules)
    for line in rules:  # the jumps into its chains from the built-in ones and from each other
        words = shlex.split(line)
        if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] in chains:
            iptables("-t", "filter", "-D", *words[1:])
    for chain in chains:
        iptables("-t", "filter", "-F", chain)
    for chain in chains:
        iptables("-t", "filter", "-X", chain)
    ipset = tools_["ipset"]
    sets = subprocess.run([ipset, "list", "-n"], capture_output=True, text=True, timeout=60).stdout.split()
    for name in (n for n in sets if n.startswith(FIREWALL_SETS)):
        subprocess.run([ipset, "destroy", name], capture_output=True, timeout=60)
    return chains


def _user_role(user: str, rules: list[dict]) -> tuple[dict, dict]:
    """A ClusterRole named ``user`` with ``rules`` and its ClusterRoleBinding to the User ``user``."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
            "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    return role, binding


def dns_rbac() -> tuple[dict, dict]:
    """The ClusterRole and ClusterRoleBinding of :data:`DNS_USER`: list and watch Services,
    EndpointSlices and Namespaces (what CoreDNS's ``kubernetes`` plugin reads), nothing else."""
    return _user_role(DNS_USER, [
        {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}])


def ctr(tools_: dict[str, str], cluster_dir: Path, *args: str, stdin=None, timeout: float = 60.0,
        check: bool = True) -> subprocess.CompletedProcess:
    """``ctr`` on this node's containerd, in the CRI's ``k8s.io`` namespace."""
    return subprocess.run([tools_["ctr"], "--address", str(socket(cluster_dir)), "--namespace", "k8s.io", *args],
                          stdin=stdin, capture_output=True, text=stdin is None, timeout=timeout, check=check)


def containerd_ready(tools_: dict[str, str], cluster_dir: Path) -> bool:
    """Whether containerd answers on its socket."""
    return socket(cluster_dir).exists() and ctr(tools_, cluster_dir, "version", timeout=5, check=False).returncode == 0


#: The label an image imported from podman's store carries: the podman image id it was saved from.
SOURCE_LABEL = "kappa.io/podman-image-id"


def _held_images(tools_: dict[str, str], cluster_dir: Path) -> dict[str, str]:
    """Image name -> its labels (``ctr images ls``' last column) in containerd's ``k8s.io`` namespace."""
    out = ctr(tools_, cluster_dir, "images", "ls").stdout.splitlines()[1:]
    return {cols[0]: cols[-1] for line in out if len(cols := line.split()) >= 2}


def import_images(settings: Settings, cluster_dir: Path, tools_: dict[str, str],
                  images: tuple[str, ...] = ()) -> list[str]:
    """Import the pause image's archive and each of ``images`` (names in podman's store, streamed
    from ``tools/container/podman.sh save``) into containerd, unless it holds that name from the same
    podman image id already (:data:`SOURCE_LABEL`). Returns the names imported. Raises
    :class:`NodeError` naming an image podman lacks or cannot save."""
    held, imported = _held_images(tools_, cluster_dir), []
    pause = images_dir(settings) / "pause.tar"
    if _archive_image(pause) not in held:
        with open(pause, "rb") as f:
            ctr(tools_, cluster_dir, "images", "import", "-", stdin=f, timeout=300)
        imported.append(_archive_image(pause))
    podman = str(settings.project_dir / "tools" / "container" / "podman.sh")
    for name in images:
        inspect = subprocess.run([podman, "image", "inspect", "--format", "{{.Id}}", name],
                                 capture_output=True, text=True, timeout=60)
        if inspect.returncode != 0:
            raise NodeError(f"image {name} is not in podman's store: build it with `make image`")
        label = f"{SOURCE_LABEL}={inspect.stdout.strip()}"
        if label in held.get(name, ""):
            continue
        save = subprocess.Popen([podman, "save", name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            ctr(tools_, cluster_dir, "images", "import", "-", stdin=save.stdout, timeout=1800)
        finally:
            save.stdout.close()  # type: ignore[union-attr]
            if save.wait(timeout=60) != 0:
                raise NodeError(f"`podman save {name}` failed (exit {save.returncode})")
        ctr(tools_, cluster_dir, "images", "label", name, label)
        imported.append(name)
    return imported


def node_status(node: dict) -> dict[str, str | bool]:
    """``ready``, ``runtime`` (e.g. ``containerd://1.6.20``) and ``kubelet`` (its version) from a
    Node object (the API's JSON)."""
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return {"ready": ready, "runtime": info.get("containerRuntimeVersion", ""), "kubelet": info.get("kubeletVersion", "")}


def drain(api_get, api_delete, timeout_s: float = 60.0) -> int:
    """Delete every pod bound to the node (a 1-second grace period: the API keeps the pod until its
    kubelet confirms, whereas 0 removes it at once and the kubelet may never stop its sandbox) and
    wait until they are gone, so their sandboxes, mounts and bridge addresses are released (the
    kubelet's StopPodSandbox runs the CNI DEL) before the node stops.
    ``api_get(path) -> (status, body)`` and ``api_delete(path)`` reach the API server as its admin.
    Returns the number of pods deleted; pods left after ``timeout_s`` are left to the caller."""
    selector = f"spec.nodeName={NODE_NAME}"
    code, body = api_get(f"/api/v1/pods?fieldSelector={selector}")
    if code != 200:
        return 0
    pods = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in json.loads(body)["items"]]
    for ns, name in pods:
        api_delete(f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=1")
    deadline = time.monotonic() + timeout_s
    while pods and time.monotonic() < deadline:
        code, body = api_get(f"/api/v1/pods?fieldSelector={selector}")
        if code == 200 and not json.loads(body)["items"]:
            break
        time.sleep(0.5)
    return len(pods)


#: The kernel settings a kubelet sets at start (``setupKernelTunables`` of its container manager:
#: ``protectKernelDefaults: false`` modifies them, ``true`` refuses to start unless they hold). They
#: are the machine's, not a namespace's: :func:`save_kernel_settings` records them before the kubelet
#: starts and :func:`restore_kernel_settings` puts them back when the node stops.
KERNEL_SETTINGS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def save_kernel_settings(cluster_dir: Path) -> None:
    """Record :data:`KERNEL_SETTINGS` as they are (unless a record exists: a node that did not stop
    cleanly left the kubelet's values in place, and the record holds the machine's own)."""
    record = node_dir(cluster_dir) / "kernel-settings.json"
    if not record.exists():
        record.write_text(json.dumps({k: Path("/proc/sys", k).read_text().strip() for k in KERNEL_SETTINGS}))


def restore_kernel_settings(cluster_dir: Path) -> dict[str, str]:
    """Put back the values :func:`save_kernel_settings` recorded; returns those it changed."""
    record = node_dir(cluster_dir) / "kernel-settings.json"
    try:
        saved = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    changed = {}
    for key, value in saved.items():
        path = Path("/proc/sys", key)
        if path.read_text().strip() != value:
            path.write_text(value)
            changed[key] = value
    record.unlink()
    return changed


def release_mounts(cluster_dir: Path) -> list[str]:
    """Unmount what is still mounted under the node's state dir once the kubelet and containerd have
    stopped: the kubelet bind-mounts its root dir onto itself (for mount propagation) and leaves it.
    Deepest first; returns the mount points released."""
    root = str(node_dir(cluster_dir).resolve())
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    inside = sorted({p for p in points if p == root or p.startswith(root + "/")}, key=len, reverse=True)
    for point in inside:
        subprocess.run(["umount", point], capture_output=True, timeout=30)
    return inside


def remove_proxy_rules(tools_: dict[str, str]) -> None:
    """Remove the iptables rules of Service IPs a stopped kube-proxy left (``kube-proxy --cleanup``)."""
    subprocess.run([tools_["kube-proxy"], "--cleanup"], capture_output=True, timeout=60)


def running_tasks(tools_: dict[str, str], cluster_dir: Path) -> list[str]:
    """The ids of containerd's tasks that still run (pod sandboxes and containers)."""
    lines = ctr(tools_, cluster_dir, "tasks", "ls", check=False).stdout.splitlines()[1:]
    return [cols[0] for line in lines if len(cols := line.split()) >= 3 and cols[2] == "RUNNING"]


def kill_leftovers(tools_: dict[str, str], cluster_dir: Path, wait_s: float = 30.0) -> list[str]:
    """Wait up to ``wait_s`` for the kubelet to stop the drained pods' sandboxes, then kill and delete
    every task and container containerd still holds (a drain that timed out, a kubelet that died):
    their shims would outlive containerd. A sandbox stopped this way never had its CNI DEL, so its
    pinned network namespace is deleted too, which removes its end of the bridge (its address would
    otherwise answer for the next pod given it). Returns the network namespaces deleted."""
    if not containerd_ready(tools_, cluster_dir):
        return []
    deadline = time.monotonic() + wait_s
    while running_tasks(tools_, cluster_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    netns = []
    for container in ctr(tools_, cluster_dir, "containers", "ls", "-q", check=False).stdout.split():
        info = ctr(tools_, cluster_dir, "containers", "info", container, check=False).stdout
        try:
            spaces = json.loads(info)["Spec"]["linux"]["namespaces"]
        except (ValueError, KeyError, TypeError):
            continue
        netns += [n["path"] for n in spaces if n.get("type") == "network" and n.get("path", "").startswith("/var/run/netns/")]
    tasks = ctr(tools_, cluster_dir, "tasks", "ls", "-q", check=False).stdout.split()
    for task in tasks:
        ctr(tools_, cluster_dir, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    for task in tasks:
        ctr(tools_, cluster_dir, "tasks", "delete", "-f", task, check=False)
    for container in ctr(tools_, cluster_dir, "containers", "ls", "-q", check=False).stdout.split():
        ctr(tools_, cluster_dir, "containers", "delete", container, check=False)
    deleted = []
    for path in sorted(set(netns)):
        if Path(path).exists():
            subprocess.run(["ip", "netns", "delete", Path(path).name], capture_output=True, timeout=30)
            deleted.append(Path(path).name)
    return deleted
