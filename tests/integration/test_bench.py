"""``kappa bench --quick`` runs end to end and writes the JSON its readers rely on (not its speed:
benchmarks are not tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import REPO
from ..kappa_cli import clean_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.broker, pytest.mark.spark]

KEYS = ("u1_events_per_s", "u2_events_per_s", "u3_events_per_s", "replay_events_per_s", "replay_over_u2",
        "replay_over_u3", "replay_over_u1", "sustained_events_per_s", "latency_ms", "cores")


@pytest.mark.timeout(600)
def test_bench_quick_writes_every_measure_as_json(tmp_path):
    out = tmp_path / "bench.json"
    env = clean_env()
    # a wide terminal, so Rich does not wrap the table's labels over lines
    env.update(KAPPA_HOME=str(tmp_path / "home"), KAPPA_PROJECT_DIR=str(REPO), COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-c", "from kappa.cli.app import app; app()", "bench", "--quick", "--output", str(out)],
        env=env, capture_output=True, text=True, timeout=580,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "U1 raw consume" in proc.stdout  # the table
    result = json.loads(out.read_text())
    for key in KEYS:
        assert key in result, key
    assert set(result["latency_ms"]) >= {"p50", "p95", "p99"}
    latency = result["latency"]  # the second method (the live table's change data feed) agrees on every row
    assert latency["rows_measured"] > 0 and latency["cross_check"]["rows_measured"] == latency["rows_measured"]
    assert latency["cross_check"]["rows_in_another_commit"] == 0
    assert result["cores"] == os.cpu_count()
    assert result["u1_events_per_s"] > 0 and result["u2_events_per_s"] > 0 and result["replay_events_per_s"] > 0
    assert result["replay"]["rows"] == result["input"]["events"]  # the replay read every event once
    # U3 does silver's work as a batch job: the same rows as the replay, one per event id
    assert result["u3"]["rows_written"] == result["replay"]["rows"] and result["u3"]["events_per_s"] > 0
    assert result["replay_over_u3"] == pytest.approx(result["replay_events_per_s"] / result["u3_events_per_s"], rel=1e-2)
    cep = result["replay_delay_streaks"]  # the CEP asset replayed over the silver table just built
    assert cep["events"] == result["replay"]["rows"] and cep["events_per_s"] > 0
    assert cep["state"]["rows"] > 0 and cep["state"]["sst_bytes"] >= 0
    assert result["replay_over_u2"] == pytest.approx(result["replay_events_per_s"] / result["u2_events_per_s"], rel=1e-2)
    join = result["replay_flights_weather"]  # the stream-stream join, next to U2
    assert join["events"] == result["replay"]["rows"] + join["weather_rows"] and join["weather_rows"] == 2_226
    assert 0 < join["rows"] <= result["replay"]["rows"] and join["state"]["rows"] >= 0
    assert "flights_weather (stream-stream join" in proc.stdout
    # Per micro-batch: the replay ran at least one batch with input, each with Spark jobs and at
    # least the one commit of silver's table; the live query the same during the latency step.
    for pb in (result["replay"]["per_batch"], result["live_per_batch"]):
        assert pb["batches_counted"] >= 1 and pb["spark_jobs"] >= 1 and pb["delta_commits"] >= 1
        phases = pb["breakdown"]["phases"]
        assert phases["addBatch"]["median_ms"] > 0 and pb["breakdown"]["holding"] in phases
        # inside addBatch, by writer step: silver evaluates its batch once and appends to its table;
        # every Spark job of the query ran inside a step
        steps = pb["steps"]
        assert steps["evaluated"] and {"evaluate", "append table"} <= set(steps["steps"]), steps
        assert "outside a step" not in steps["steps"], steps
        assert sum(s["wall_ms"] for s in steps["steps"].values()) > 0 and steps["holding"] in steps["steps"], steps
    # records read, by step: silver's evaluation reads the replayed log once (its state-store and
    # behind-the-watermark branches read one shuffle of the parsed records), and nothing else does
    steps = result["replay"]["per_batch"]["steps"]["steps"]
    assert steps["evaluate"]["input_records"] == result["input"]["events"], steps
    assert "replay per micro-batch" in proc.stderr + proc.stdout
    scaling = result["scaling"]  # a new version replays the whole log at each size, every event once
    assert [p["events"] for p in scaling["points"]] == [1_000, 2_000, 4_000]
    assert all(p["rows"] == p["events"] and p["events_per_s"] > 0 for p in scaling["points"])
    assert scaling["growth"] == pytest.approx(scaling["points"][-1]["events_per_s"] / scaling["points"][0]["events_per_s"], rel=1e-2)
    judged = {j["target"]: j for j in result["judged"]}
    assert len(judged) == 4 and all(j["met"] is not None for j in judged.values())
    assert all(j["holding"] for j in judged.values() if j["met"] is False)


@pytest.mark.timeout(300)
def test_sigterm_stops_the_bench_and_the_broker_it_started(tmp_path):
    env = clean_env()
    env.update(KAPPA_HOME=str(tmp_path / "home"), KAPPA_PROJECT_DIR=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from kappa.cli.app import app; app()", "bench", "--quick"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        for line in proc.stderr:  # the broker is up once the bench has ingested
            if "ingested" in line:
                break
        assert _processes_under(tmp_path), "the bench's broker should be running now"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while _processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_under(tmp_path), "the broker outlived the bench"


def _processes_under(root) -> list[int]:
    """Live processes whose command line names a path under ``root`` (the bench's broker)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
            state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if str(root) in cmdline and state != "Z":
            pids.append(int(entry))
    return pids
