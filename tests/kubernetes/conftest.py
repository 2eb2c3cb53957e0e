"""Fixtures of the tests against a real Kubernetes control plane (:mod:`kappa.services.cluster`).

One plane for this package's tests: kine, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (one
node) and the real Spark operator controller, started from the binaries `make cluster-tools` built
(``make test`` builds them first; if they are missing the first test runs that target, which takes
minutes once). Its state lives in a temporary KAPPA_HOME, so a plane a user started by hand with
`make cluster-up` is neither reused nor stopped. The tests never skip: a test that is not run rots.

There is no container runtime: kwok reports pods bound to its node as Running without starting
anything. What runs nothing cannot show (a container's own behaviour) is said in each test.
"""

from __future__ import annotations

import uuid

import pytest

from kappa.services import cluster
from kappa.config import load_settings
import json

from tests.kubernetes.plane import ROOT, TOOLS, ensure_cluster_tools, kappa_namespace, kubectl_run, wait_for


def _all_established(plane: cluster.ClusterStatus, path: str) -> bool:
    """Whether every CustomResourceDefinition in ``path`` has condition Established=True."""
    items = json.loads(kubectl_run(plane, "get", "-f", path, "-o", "json").stdout)
    items = items.get("items", [items])
    return bool(items) and all(
        any(c["type"] == "Established" and c["status"] == "True" for c in (i.get("status") or {}).get("conditions") or [])
        for i in items)


@pytest.fixture(scope="package")
def plane(tmp_path_factory) -> cluster.ClusterStatus:
    """The running control plane, with Strimzi's CRDs applied; stopped when this package's tests end,
    not with the session: every test using it is here, and ``make test`` runs them on one worker in
    a row (its ``xdist_group``, tests/conftest.py), so the plane does not idle through the rest of
    the run (measured with process accounting: it lived 761 s instead of 2,902 s; kine and
    kube-apiserver used 98 CPU-s instead of 115, most of it during these tests)."""
    ensure_cluster_tools()
    settings = load_settings(project_dir=ROOT, home=tmp_path_factory.mktemp("cluster-home"))
    status = cluster.start(settings, timeout_s=180)
    try:
        strimzi = str(sorted(TOOLS.glob("strimzi-*/crds"))[-1])
        kubectl_run(status, "apply", "--server-side", "-f", strimzi)
        # Polled, not `kubectl wait`: that errors out on a CRD whose status has no conditions yet.
        wait_for("Strimzi's CRDs Established", lambda: _all_established(status, strimzi), timeout_s=60)
        yield status
    finally:
        cluster.stop(settings)


@pytest.fixture(scope="package")
def kubectl(plane):
    """``kubectl(*args, stdin=None, check=True)`` against the plane."""
    return lambda *args, **kw: kubectl_run(plane, *args, **kw)


@pytest.fixture(scope="package")
def api_client(plane):
    """A ``kubernetes.client.ApiClient`` with the plane's admin token."""
    from kubernetes import config

    return config.new_client_from_config(config_file=plane.kubeconfig)


@pytest.fixture
def namespace(plane) -> str:
    """A fresh restricted namespace per test (``kappa-t-<random>``), deleted afterwards."""
    name = f"kappa-t-{uuid.uuid4().hex[:8]}"
    kappa_namespace(plane, name)
    yield name
    kubectl_run(plane, "delete", "namespace", name, "--wait=false", check=False)
