"""`kappa cluster status` against the session's plane (its KAPPA_HOME), and the admin kubeconfig."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.kubernetes.plane import ROOT


def test_cluster_status_reports_every_process_and_the_kubeconfig_works(plane, kubectl):
    home = Path(plane.state_dir).parent
    proc = subprocess.run([sys.executable, "-m", "kappa.cli", "cluster", "status", "--format", "json"], cwd=ROOT,
                          env={**os.environ, "KAPPA_HOME": str(home)}, capture_output=True, text=True, check=True)
    status = json.loads(proc.stdout)
    assert status["up"] is True and status["server"] == plane.server
    assert set(status["processes"]) == {"kine", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                        "kwok", "spark-operator"}
    assert all(status["processes"].values())
    nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["kwok-node-0"]
    crds = kubectl("get", "crd", "-o", "name").stdout
    assert "sparkapplications.sparkoperator.k8s.io" in crds and "kafkatopics.kafka.strimzi.io" in crds


def test_kwok_renews_the_nodes_lease_so_the_node_and_its_pods_stay_ready(plane, kubectl):
    """kwok's heartbeat stage updates the node's status every ~10 min and leaves liveness to the
    node's Lease. Without one, the node-lifecycle controller marked the node NotReady every ~55 s,
    and every pod on it with it (a Deployment then never became available: a CI run's `helm
    install --wait` timed out)."""
    lease = json.loads(kubectl("get", "lease", "kwok-node-0", "-n", "kube-node-lease", "-o", "json").stdout)
    renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert dt.datetime.now(dt.timezone.utc) - renewed < dt.timedelta(seconds=40), lease["spec"]
    log = (Path(plane.state_dir) / "kube-controller-manager.log").read_text()
    assert "Nodes are not-Ready" not in log, [line for line in log.splitlines() if "not-Ready" in line]
