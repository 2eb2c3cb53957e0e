"""The real node's config templates (tools/node, :mod:`kappa.services.node`): each renders with every
placeholder filled and parses as its part reads it; the settings the machine needs are there."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from kappa.config import load_settings
from kappa.services import node

ROOT = Path(__file__).resolve().parents[2]


def _rendered(tmp_path: Path) -> Path:
    tools_dir = tmp_path / "bin"
    tools_dir.mkdir()
    settings = load_settings(project_dir=ROOT, home=tmp_path / "home")
    tools = {"containerd": "/usr/bin/containerd", "kubelet": str(tools_dir / "kubelet"),
             "kube-proxy": str(tools_dir / "kube-proxy"), "coredns": str(tools_dir / "coredns"), "ctr": "/usr/bin/ctr",
             "kube-router": str(tools_dir / "kube-router")}
    cluster_dir = tmp_path / "cluster"
    commands = node.prepare(settings, cluster_dir, server="https://127.0.0.1:6443", ca=tmp_path / "ca.crt",
                            token="t0k3n", proxy_token="pr0xy", dns_token="dn5",
                            firewall_token="f1rewa11", service_cidr="10.96.0.0/16", tools_=tools)
    assert commands["kubelet"][0] == tools["kubelet"] and f"--hostname-override={node.NODE_NAME}" in commands["kubelet"]
    # kube-router runs its NetworkPolicy firewall only: kube-proxy serves Services, one bridge needs no routes
    firewall = commands["kube-router"]
    assert firewall[0] == tools["kube-router"] and {"--run-firewall=true", "--run-router=false",
                                                     "--run-service-proxy=false", "--metrics-port=0",
                                                     "--service-cluster-ip-range=10.96.0.0/16"} <= set(firewall)
    return node.node_dir(cluster_dir)


def test_each_template_renders_and_parses(tmp_path, monkeypatch):
    # the pause image's name comes from its archive (make node-tools), which this test does without
    monkeypatch.setattr(node, "_archive_image", lambda archive: "localhost/kappa/pause:test")
    d = _rendered(tmp_path)
    texts = {p.name: p.read_text() for p in (d / "containerd.toml", d / "kubelet.yaml", d / "kube-proxy.yaml",
                                              d / "Corefile", d / "cni" / "net.d" / "10-kappa.conflist")}
    assert not [name for name, text in texts.items() if "${" in text]

    containerd = tomllib.loads(texts["containerd.toml"])
    cri = containerd["plugins"]["io.containerd.grpc.v1.cri"]
    assert containerd["grpc"]["address"] == str(node.socket(d.parent))
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
    assert cri["sandbox_image"] == "localhost/kappa/pause:test"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False

    kubelet = yaml.safe_load(texts["kubelet.yaml"])
    assert kubelet["cgroupDriver"] == "cgroupfs" and kubelet["failCgroupV1"] is False
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{node.socket(d.parent)}"
    assert kubelet["authentication"]["anonymous"]["enabled"] is False and kubelet["authorization"]["mode"] == "Webhook"
    assert kubelet["clusterDNS"] == [node.node_ip()] and f"bind {node.node_ip()}" in texts["Corefile"]
    assert kubelet["readOnlyPort"] == 0 and kubelet["address"] == node.node_ip() != "127.0.0.1"

    proxy = yaml.safe_load(texts["kube-proxy.yaml"])
    assert proxy["mode"] == "iptables" and proxy["clusterCIDR"] == node.POD_CIDR
    # the machine's conntrack limits and route_localnet are left alone
    assert proxy["conntrack"]["maxPerCore"] == 0 and proxy["iptables"]["localhostNodePorts"] is False

    cni = json.loads(texts["10-kappa.conflist"])
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": node.POD_CIDR}]]

    for name, user, token in (("kubelet", node.NODE_USER, "t0k3n"), ("kube-proxy", node.PROXY_USER, "pr0xy"),
                              ("coredns", node.DNS_USER, "dn5"), ("kube-router", node.FIREWALL_USER, "f1rewa11")):
        kubeconfig = yaml.safe_load((d / f"{name}.kubeconfig").read_text())
        assert kubeconfig["users"] == [{"name": user, "user": {"token": token}}]
        assert (d / f"{name}.kubeconfig").stat().st_mode & 0o077 == 0


def test_a_missing_tool_names_make_node_tools(tmp_path):
    settings = load_settings(project_dir=tmp_path, home=tmp_path / "home")
    try:
        node.tools(settings, tmp_path / "no-bin")
    except node.NodeError as exc:
        assert "make node-tools" in str(exc)
    else:
        raise AssertionError("no NodeError without the node's tools")
