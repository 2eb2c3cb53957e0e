"""Dagster's `dg` CLI from the repo root, as a developer runs it (``[tool.dg]`` in pyproject.toml):
``dg list defs`` lists the streaming and dbt assets, and ``dg dev`` serves the UI and its GraphQL
API over the code location ``kappa``. No broker or Spark: loading definitions needs neither."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kappa.harness.env import free_port
from kappa.core import processes
from tests.conftest import dagster_instance
from tests.graphql import post as _post

REPO = Path(__file__).resolve().parents[2]
DG = str(Path(sys.executable).parent / "dg")

QUERY = """
query {
  repositoriesOrError { ... on RepositoryConnection { nodes { location { name } sensors { name } } } }
  assetNodes { assetKey { path } groupName }
}
"""


def _env(tmp_path: Path) -> dict[str, str]:
    # a private Dagster instance and Kappa state: the daemon's sensors must not read the repo's .kappa
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    dagster_instance(home)
    return {**os.environ, "DAGSTER_HOME": str(home), "KAPPA_HOME": str(tmp_path / "kappa_home"), "COLUMNS": "200"}


def test_dg_list_defs_lists_streaming_and_dbt_assets(tmp_path):
    done = subprocess.run([DG, "list", "defs", "--json"], cwd=REPO, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    defs = json.loads(done.stdout)
    groups = {a["asset_key"]: a["group_name"] for a in defs["assets"]}
    assert groups["flights"] == "flights" and groups["carrier_daily_performance"] == "analytics"
    assert "flights" in next(a for a in defs["assets"] if a["asset_key"] == "stg_kappa__flights")["dependency_keys"]
    assert "flights:expect_column_values_to_be_unique" in {c["key"].split("__")[0] for c in defs["asset_checks"]}


def test_dg_dev_serves_the_ui_and_graphql(tmp_path):
    port = free_port()
    log_path = tmp_path / "dg-dev.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([DG, "dev", "-h", "127.0.0.1", "-p", str(port)], cwd=REPO, env=_env(tmp_path),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        data: dict = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            data = _post(f"{base}/graphql", QUERY)
            if (data.get("data") or {}).get("assetNodes"):
                break
            time.sleep(2)
        assert "errors" not in data, f"{data.get('errors')}\n{log_path.read_text()[-3000:]}"
        [repo] = data["data"]["repositoriesOrError"]["nodes"]
        assert repo["location"]["name"] == "kappa"  # code_location_name in [tool.dg.project]
        assert "kappa_registry" in {s["name"] for s in repo["sensors"]}
        groups = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in data["data"]["assetNodes"]}
        assert groups["flights"] == "flights" and groups["carrier_daily_performance"] == "analytics"
        with urllib.request.urlopen(f"{base}/assets", timeout=30) as resp:  # the UI itself
            assert resp.status == 200 and b"<html" in resp.read(2000).lower()
    finally:
        processes.terminate(proc.pid, grace_s=30, group=True)  # the server's whole process group
