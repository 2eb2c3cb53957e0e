"""Helpers of the tests against the local control plane (fixtures: conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helm"))

from helmtools import CHART, DEFAULT_VALUES, helm  # noqa: E402

from kappa.services import cluster

TOOLS = ROOT / "build" / "tools"
__all__ = ["CHART", "DEFAULT_VALUES", "ROOT", "TOOLS", "helm", "helm_on", "kappa_namespace", "kubectl_run", "wait_for",
           "ensure_cluster_tools"]


def ensure_cluster_tools() -> None:
    """Build the control plane's binaries and the CRDs through make (stamps keep it quick)."""
    needed = [TOOLS / "bin" / n for n in (*cluster.PROCESSES, "kubectl", "helm")]
    if all(p.exists() for p in needed) and list(TOOLS.glob("strimzi-*/crds/047-Crd-kafkaconnector.yaml")):
        return
    proc = subprocess.run(["make", "-s", "cluster-tools"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"`make cluster-tools` failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def kubectl_run(plane: cluster.ClusterStatus, *args: str, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    """`kubectl` (the pinned build) against the plane."""
    proc = subprocess.run([str(TOOLS / "bin" / "kubectl"), f"--kubeconfig={plane.kubeconfig}", *args],
                          input=stdin, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def helm_on(plane: cluster.ClusterStatus, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`helm` (the pinned build) against the plane."""
    return helm(*args, f"--kubeconfig={plane.kubeconfig}", check=check)


def kappa_namespace(plane: cluster.ClusterStatus, name: str, *values: str) -> str:
    """Create namespace ``name`` from the kappa chart's own Namespace template (Pod Security
    ``restricted`` labels), as tools/deploy.sh does, plus the drivers' service account that the
    spark-operator chart creates there in a real deployment."""
    args = ["template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", name, "--show-only", "templates/000-Namespace.yaml"]
    for v in values:
        args += ["-f", v]
    args += ["--set", "namespace.create=true"]  # a scenario may leave the namespace to deploy.sh
    kubectl_run(plane, "apply", "--server-side", "-f", "-", stdin=helm(*args).stdout)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kappa-spark", "namespace": name}}
    kubectl_run(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(sa))
    return name


def wait_for(what: str, check, timeout_s: float = 60.0, every_s: float = 0.25, detail=None):
    """Poll ``check()`` until it returns something truthy (returned), or fail naming ``what`` (and
    ``detail()``'s text, e.g. a pod's log, when given)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})"
                         + (f"\n{detail()}" if detail else ""))


def client_as(plane: cluster.ClusterStatus, api_client, namespace: str, account: str):
    """A ``kubernetes.client.ApiClient`` that authenticates as service account ``account`` of
    ``namespace``, with a token the plane's API server issued for it (TokenRequest, 10 min)."""
    from kubernetes import client

    token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        account, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc.cluster.local"], expiration_seconds=600))).status.token
    conf = client.Configuration()
    conf.host = plane.server
    conf.ssl_ca_cert = str(plane.state_dir) + "/pki/ca.crt"
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(conf)
