"""``kappa bench --quick`` runs end to end and writes the JSON its readers rely on (not its speed:
benchmarks are not tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = ("u1_events_per_s", "u2_events_per_s", "replay_events_per_s", "replay_over_u2", "replay_over_u1",
        "sustained_events_per_s", "latency_ms", "cores")


@pytest.mark.timeout(600)
def test_bench_quick_writes_every_measure_as_json(tmp_path):
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env.update(KAPPA_HOME=str(tmp_path / "home"), KAPPA_PROJECT_DIR=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", "from kappa.cli import app; app()", "bench", "--quick", "--output", str(out)],
        env=env, capture_output=True, text=True, timeout=580,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "U1 raw consume" in proc.stdout  # the table
    result = json.loads(out.read_text())
    for key in KEYS:
        assert key in result, key
    assert set(result["latency_ms"]) >= {"p50", "p95", "p99"}
    assert result["cores"] == os.cpu_count()
    assert result["u1_events_per_s"] > 0 and result["u2_events_per_s"] > 0 and result["replay_events_per_s"] > 0
    assert result["replay"]["rows"] == result["input"]["events"]  # the replay read every event once
    assert result["replay_over_u2"] == pytest.approx(result["replay_events_per_s"] / result["u2_events_per_s"], rel=1e-2)
