"""Helpers for the chart tests: the pinned tools (built by `make tools`, never skipped) and a
renderer that runs `helm template` and returns the objects as dicts.

If helm, kubeconform or the schemas are missing, the first test that needs them runs `make tools`
(a few minutes on a fresh machine, seconds when the stamps exist); if that fails the tests fail
with make's output. They never skip: a test that is not run rots.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kappa"
TOOLS = ROOT / "build" / "tools"
HELM = TOOLS / "bin" / "helm"
KUBECONFORM = TOOLS / "bin" / "kubeconform"
SCHEMAS = TOOLS / "schemas"
SCENARIOS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
#: The chart's defaults plus the values every deployment must give (the egress peers); what a
#: render with no scenario uses. Each other scenario names them itself.
DEFAULT_VALUES = CHART / "ci" / "default-values.yaml"


def ensure_tools() -> None:
    """Build the pinned tools and schemas through the make target (stamp files keep it quick)."""
    # the KafkaConnect schema came later than the stamp: a tree made before it re-runs the target
    if HELM.exists() and KUBECONFORM.exists() and (SCHEMAS / "crds" / "kafka.strimzi.io" / "kafkaconnect_v1beta2.json").exists():
        return
    proc = subprocess.run(["make", "-s", "tools"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"`make tools` failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def helm(*args: str, check: bool = True, chart: Path = CHART) -> subprocess.CompletedProcess:
    ensure_tools()
    proc = subprocess.run(
        [str(HELM), *args], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "HELM_CACHE_HOME": str(TOOLS / "helm-cache"), "HELM_CONFIG_HOME": str(TOOLS / "helm-config")},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def render(*values_files: str, sets: tuple[str, ...] = (), chart: Path = CHART) -> list[dict]:
    """`helm template kappa <chart> -n kappa` with values files (names under ci/ or paths; none:
    :data:`DEFAULT_VALUES`) and `--set` pairs; the objects it renders, in order."""
    args = ["template", "kappa", str(chart), "--namespace", "kappa"]
    for f in values_files or (str(DEFAULT_VALUES),):
        path = chart / "ci" / f if not os.path.isabs(f) else Path(f)
        args += ["-f", str(path)]
    for s in sets:
        args += ["--set", s]
    out = helm(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_fails(*sets: str) -> str:
    """Render :data:`DEFAULT_VALUES` with `--set` pairs that must be refused; the error text."""
    args = ["template", "kappa", str(CHART), "--namespace", "kappa", "-f", str(DEFAULT_VALUES)]
    for s in sets:
        args += ["--set", s]
    proc = helm(*args, check=False)
    assert proc.returncode != 0, f"helm template accepted {sets}"
    return proc.stderr


def kinds(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o.get("kind") == kind]
