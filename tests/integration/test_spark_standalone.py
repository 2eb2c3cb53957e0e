"""Beyond one JVM (issue 20 item 5): the silver pipeline on a real Spark standalone cluster
(`kappa spark start`: a master and two workers from the pyspark package), with its table, checkpoint
and the registry on the object store (`kappa objectstore start`), run as a user runs it
(`kappa run flights --continuous`). A worker and its executor are killed (SIGKILL, as a lost machine)
while a micro-batch runs; the query goes on with the other worker, and every flight is accounted for
exactly once (in the table, or behind the watermark in the late-events table), the copies dropped.

What the Spark status API (the driver's REST API, ``/api/v1``) and the workers' JSON show: the
application's executors run in the workers' JVMs, not the driver's; before the kill the stage that
reads the topic's three partitions ran tasks on both workers' executors; after it the lost executor
is marked removed and the later micro-batches ran on the other one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from ..conftest import REPO, free_port
from ..kappa_cli import run_kappa

pytestmark = [pytest.mark.integration, pytest.mark.broker, pytest.mark.spark, pytest.mark.objectstore]

VERSITYGW = REPO / "build" / "tools" / "bin" / "versitygw"
#: flights published before the query starts, and in all (the second ingest re-publishes the first
#: FIRST as well: copies that silver must drop).
FIRST, TOTAL = 1500, 3000


def kappa(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    done = run_kappa(*args, env=env, timeout=timeout)
    assert done.returncode == 0, f"kappa {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def silver(env: dict[str, str]) -> dict:
    """flights v1's table path, rows and distinct event ids; the late-events table's rows and
    distinct ids for flights, how many of those are also in the table; the quarantine's rows. Read
    with delta-rs in a fresh interpreter that has only ``env``."""
    script = """
        import json
        import pyarrow.compute as pc
        from kappa.config import load_settings
        from kappa.core import storage
        from kappa.delta.registry import Registry, late_events_path, quarantine_path
        from kappa.delta.tables import dataset

        settings = load_settings()
        v = Registry(settings).latest("flights")
        ids = dataset(v.table_path, settings).to_table(columns=["event_id"]).column("event_id").to_pylist()
        late, quarantine = [], 0
        if storage.exists(storage.join(late_events_path(settings), "_delta_log"), settings):
            t = dataset(str(late_events_path(settings)), settings).to_table(columns=["asset", "event_id"])
            late = t.filter(pc.equal(t["asset"], "flights")).column("event_id").to_pylist()
        if storage.exists(storage.join(quarantine_path(settings), "_delta_log"), settings):
            quarantine = dataset(str(quarantine_path(settings)), settings).count_rows()
        print(json.dumps({"table": v.table_path, "checkpoint": v.checkpoint_path, "rows": len(ids), "distinct": len(set(ids)), "late": len(late),
                          "late_distinct": len(set(late)), "in_both": len(set(ids) & set(late)),
                          "quarantine": quarantine}))
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_silver_on_a_standalone_cluster_and_the_object_store_survives_a_lost_worker(tmp_path):
    if not os.access(VERSITYGW, os.X_OK):
        pytest.fail(f"{VERSITYGW} is missing: run `make objectstore-tools`")
    ui = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KAPPA_", "SPARK_", "PYSPARK_"))}
    env.update(KAPPA_HOME=str(tmp_path / "home"), KAPPA_PROJECT_DIR=str(REPO),
               KAPPA_OBJECTSTORE_PORT=str(free_port()), KAPPA_OBJECTSTORE_BUCKET="standalone",
               KAPPA_KAFKA_PORT=str(free_port()), KAPPA_KAFKA_CONTROLLER_PORT=str(free_port()),
               KAPPA_SPARK_CLUSTER_PORT=str(free_port()), KAPPA_SPARK_CLUSTER_WEBUI_PORT=str(free_port()),
               KAPPA_SPARK_UI="true", KAPPA_SPARK_UI_PORT=str(ui), KAPPA_SPARK_DRIVER_MEMORY="1g")
    started: list[str] = []
    run = None
    try:
        kappa("objectstore", "start", env=env)
        started.append("objectstore")
        env.update(json.loads(kappa("objectstore", "status", "--format", "json", env=env).stdout)["env"])
        kappa("kafka", "start", env=env, timeout=180)
        started.append("kafka")
        kappa("spark", "start", env=env, timeout=180)
        started.append("spark")
        cluster = json.loads(kappa("spark", "status", "--format", "json", env=env).stdout)
        assert cluster["up"] and [w["state"] for w in cluster["workers"]] == ["ALIVE", "ALIVE"], cluster
        env.update(cluster["env"])  # KAPPA_SPARK_MASTER=spark://127.0.0.1:<port>
        assert env["KAPPA_SPARK_MASTER"].startswith("spark://127.0.0.1:")

        kappa("ingest", "nycflights13", "--limit", str(FIRST), env=env, timeout=300)
        log = open(tmp_path / "run.log", "w")
        run = subprocess.Popen([sys.executable, "-m", "kappa.cli", "run", "flights", "--continuous"],
                               stdout=log, stderr=subprocess.STDOUT, env={**env, "COLUMNS": "200"}, cwd=REPO)
        api = f"http://127.0.0.1:{ui}/api/v1"
        deadline = time.monotonic() + 300
        while True:
            assert run.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no first micro-batch in 300 s: " + (tmp_path / "run.log").read_text()[-3000:]
            try:
                if silver(env)["rows"] == FIRST:
                    break
            except AssertionError:
                pass  # no registry or table yet
            time.sleep(5)
        app = get(f"{api}/applications")[0]["id"]
        executors = {e["id"]: e for e in get(f"{api}/applications/{app}/allexecutors")}
        # executors in the workers' JVMs: one per worker, each known to exactly one worker
        on_worker = {}
        for w in json.loads(kappa("spark", "status", "--format", "json", env=env).stdout)["workers"]:
            state = get(w["webuiaddress"].rstrip("/") + "/json/")
            for ex in state["executors"]:
                if ex["appid"] == app:
                    on_worker[str(ex["id"])] = w["name"]
        assert sorted(on_worker.values()) == ["worker-1", "worker-2"] and set(on_worker) < set(executors), (
            on_worker, executors.keys())
        # the stage that read the topic's partitions (3 tasks, records read) ran on both workers
        read_by = set()
        for stage in get(f"{api}/applications/{app}/stages?status=complete"):
            if stage["numTasks"] != 3 or stage["inputRecords"] < FIRST:
                continue
            tasks = get(f"{api}/applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=100")
            read_by |= {on_worker[t["executorId"]] for t in tasks
                        if t["status"] == "SUCCESS" and t["taskMetrics"]["inputMetrics"]["recordsRead"] > 0}
        assert read_by == {"worker-1", "worker-2"}, read_by

        # more flights (and copies of the first ones), then lose worker-1 while a micro-batch runs
        kappa("ingest", "nycflights13", "--limit", str(TOTAL), env=env, timeout=300)
        deadline = time.monotonic() + 120
        while not get(f"{api}/applications/{app}/jobs?status=running"):
            assert time.monotonic() < deadline, "no micro-batch started after the second ingest"
            time.sleep(0.2)
        victim = next(e for e, w in on_worker.items() if w == "worker-1")
        subprocess.run([sys.executable, "-c", "from kappa.config import load_settings; "
                        "from kappa.services.spark_cluster import kill_worker; kill_worker(load_settings(), 'worker-1')"],
                       env=env, cwd=REPO, check=True, timeout=60)

        deadline = time.monotonic() + 300
        while (got := silver(env))["distinct"] + got["late_distinct"] < TOTAL:
            assert run.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"{got} after the kill: " + (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(5)
        time.sleep(12)  # one more trigger: nothing more may arrive
        got = silver(env)
        assert got["table"].startswith("s3a://standalone/warehouse/flights/")
        assert got["checkpoint"].startswith("s3a://standalone/checkpoints/flights/")
        # every flight exactly once: in the table, or (event time behind the watermark the first
        # micro-batch set: the first 1,500 flights are not in event-time order with the rest) in the
        # late-events table, never both; the copies dropped; nothing quarantined
        assert got["rows"] == got["distinct"] and got["late"] == got["late_distinct"] and got["in_both"] == 0, got
        assert got["distinct"] + got["late_distinct"] == TOTAL and got["quarantine"] == 0, got

        after = {e["id"]: e for e in get(f"{api}/applications/{app}/allexecutors")}
        assert not after[victim]["isActive"] and after[victim]["removeReason"], after[victim]
        survivor = next(e for e, w in on_worker.items() if w == "worker-2")
        assert after[survivor]["isActive"] and after[survivor]["totalTasks"] > executors[survivor]["totalTasks"]
        print(f"\nexecutors: {json.dumps({e: [on_worker.get(e), a['isActive'], a['totalTasks'], a['failedTasks'], a.get('removeReason')] for e, a in after.items()})}")
    finally:
        if run is not None and run.poll() is None:
            run.send_signal(signal.SIGTERM)
            try:
                run.wait(timeout=120)
            except subprocess.TimeoutExpired:
                run.kill()
        for service in reversed(started):
            subprocess.run([sys.executable, "-m", "kappa.cli", service, "stop"], env=env, cwd=REPO,
                           capture_output=True, timeout=120)
    assert run.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
