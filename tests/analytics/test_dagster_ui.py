"""The Dagster UI shows the registry's truth: `dagster dev` over a state where the CLI path ran the
gate and promoted v1 (as `make demo` does), the asset's Checks tab rendered by headless Chromium
shows the promoted version's checks evaluated and passed. The screenshot is kept in
``.kappa/test-artifacts/`` (git-ignored)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO, free_port
from kappa.core import processes
from ..graphql import post as _post

pytestmark = pytest.mark.integration

ARTIFACTS = REPO / ".kappa" / "test-artifacts"

CHECKS = """
query {
  assetNodeOrError(assetKey: {path: ["flights"]}) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks {
        name
        executionForLatestMaterialization { status evaluation { success metadataEntries { label } } }
      } } }
    }
  }
  assetOrError(assetKey: {path: ["flights"]}) {
    ... on Asset { assetMaterializations(limit: 5) { metadataEntries { label
      ... on IntMetadataEntry { intValue } } } }
  }
}
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.fail("chromium is not installed: `make test` installs Debian's chromium package")


def test_checks_tab_shows_the_promoted_versions_gate_passed(served, tmp_path):
    from kappa.delta.registry import Registry

    settings, _ = served
    promoted = Registry(settings).promoted("flights")
    port = free_port()
    home = tmp_path / "dagster_home"
    home.mkdir()
    # no "join the community" dialog over the page (Dagster instance setting `nux`)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")
    log_path = tmp_path / "dagster.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "KAPPA_HOME": str(settings.home),
           "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
           "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port)}
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1",
                                 "-p", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        # The daemon runs the kappa_registry sensor; wait until its first tick has been recorded.
        deadline = time.monotonic() + 420
        checks: list = []
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            data = _post(f"{base}/graphql", CHECKS)
            node = (data.get("data") or {}).get("assetNodeOrError") or {}
            checks = (node.get("assetChecksOrError") or {}).get("checks") or []
            if checks and all(c["executionForLatestMaterialization"] for c in checks
                              if c["name"] != "query_health"):
                break
            time.sleep(3)
        gate = [c for c in checks if c["name"] != "query_health"]
        assert gate, f"no checks served: {log_path.read_text()[-3000:]}"
        for c in gate:
            execution = c["executionForLatestMaterialization"]
            assert execution is not None, f"{c['name']} not evaluated"
            assert execution["status"] == "SUCCEEDED" and execution["evaluation"]["success"], c
            labels = {e["label"] for e in execution["evaluation"]["metadataEntries"]}
            assert {"version", "observed", "expected"} <= labels, c
        [latest, *_] = data["data"]["assetOrError"]["assetMaterializations"]
        md = {e["label"]: e.get("intValue") for e in latest["metadataEntries"]}
        assert md["version"] == promoted.version and "source_offsets" in md and md["dagster/row_count"] > 0

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        png = ARTIFACTS / "dagster-flights-checks.png"
        png.unlink(missing_ok=True)
        url = f"{base}/assets/flights?view=checks"
        common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--window-size=1600,1100", "--virtual-time-budget=30000", f"--user-data-dir={tmp_path / 'chrome'}"]
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
        subprocess.run([*common, f"--screenshot={png}", url], capture_output=True, timeout=240)
        assert png.exists() and png.stat().st_size > 10_000
        # The rendered page lists the gate's checks with their latest result.
        for c in gate:
            assert c["name"] in dom, c["name"]
        assert "Passed" in dom or "Succeeded" in dom
        assert "Not evaluated" not in dom.replace("query_health", "")
    finally:
        processes.terminate(proc.pid, grace_s=60, group=True)  # the server's whole process group
