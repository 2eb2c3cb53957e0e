"""`kappa cluster status` against the session's plane (its KAPPA_HOME), and the admin kubeconfig."""

from __future__ import annotations

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
