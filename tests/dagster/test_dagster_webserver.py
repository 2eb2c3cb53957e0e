"""The Dagster webserver, started the way a developer starts it (from the repo root, no arguments:
the code location comes from ``[tool.dagster]`` in pyproject.toml), serves the streaming assets and
their checks over its GraphQL API. No broker or Spark: loading definitions needs neither."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kappa.harness.env import free_port
from kappa.spec import load_catalog
from kappa.core import processes
from tests.graphql import post as _post

REPO = Path(__file__).resolve().parents[2]

QUERY = """
query {
  assetNodes {
    assetKey { path }
    groupName
    kinds
    isMaterializable
    owners { ... on TeamAssetOwner { team } ... on UserAssetOwner { email } }
    dependencyKeys { path }
    assetChecksOrError { ... on AssetChecks { checks { name blocking } } }
  }
  repositoriesOrError {
    ... on RepositoryConnection { nodes { location { name } sensors { name } jobs { name } } }
  }
}
"""


def test_webserver_graphql_lists_streaming_assets_and_checks(tmp_path):
    port = free_port()
    home = tmp_path / "dagster_home"
    home.mkdir()
    log = (tmp_path / "webserver.log").open("w")
    exe = Path(sys.executable).parent / "dagster-webserver"
    proc = subprocess.Popen(
        [str(exe), "-h", "127.0.0.1", "-p", str(port)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "DAGSTER_HOME": str(home)}, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/server_info", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "webserver did not answer within 120 s"
            time.sleep(1)
        # The code location loads in the background; poll until its assets are served.
        while True:
            data = _post(f"{base}/graphql", QUERY)
            assert "errors" not in data, data["errors"]
            nodes = data["data"]["assetNodes"]
            if nodes or time.monotonic() > deadline:
                break
            time.sleep(1)
        by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
        catalog = load_catalog(REPO / "assets")
        for spec in catalog:
            node = by_key[spec.name]
            assert node["isMaterializable"] and node["groupName"] == spec.group
            assert {"spark", "delta"} <= set(node["kinds"])
            assert node["owners"] == [{"team": spec.owner.removeprefix("team:")}]
            checks = {c["name"]: c["blocking"] for c in node["assetChecksOrError"]["checks"]}
            assert checks.pop("query_health") is False
            assert checks and all(checks.values()) and "shadow_diff" in checks, spec.name
        for topic in {t for name in catalog.assets for t in catalog[name].topics}:  # topics some asset reads
            assert not by_key[f"topic/{topic}"]["isMaterializable"]
        assert [{"path": ["topic", "flights"]}] == by_key["flights"]["dependencyKeys"]
        [repo] = data["data"]["repositoriesOrError"]["nodes"]
        assert repo["location"]["name"] == "kappa"  # code_location_name in pyproject.toml
        assert sorted(s["name"] for s in repo["sensors"]) == ["kappa_advance", "kappa_archives", "kappa_automation",
                                                         "kappa_registry", "kappa_streaming_queries"]
        assert "replay" in {j["name"] for j in repo["jobs"]}
    finally:
        processes.terminate(proc.pid, grace_s=30, group=True)  # the server's whole process group
        log.close()
