"""The `kappa` command: its help, option checks and one-line errors in process (Typer's CliRunner,
tests/kappa_cli.py), and as a user runs it, a subprocess, where a process boundary is the point
(signals, Spark's output); a real broker; clear errors, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO, free_port
from ..kappa_cli import KAPPA, invoke_kappa, run_kappa
from ..kappa_cli import settings_env as env_for

pytestmark = pytest.mark.integration


def kappa(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`kappa ARGS` in a subprocess with this process's environment plus ``env``."""
    return run_kappa(*args, env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.parametrize("command", [[], ["kafka"], ["kafka", "start"], ["kafka", "stop"], ["kafka", "status"],
                                     ["ingest", "nycflights13"], ["run"], ["sql"], ["assets"], ["versions"],
                                     ["gate"], ["replay"], ["promote"], ["rollback"], ["demo"], ["forget"],
                                     ["chaos"], ["chaos", "driver"], ["chaos", "broker"], ["bench"], ["bench", "nexmark"],
                                     ["postgres", "start"], ["postgres", "stop"], ["postgres", "status"],
                                     ["connect", "start"], ["connect", "stop"], ["connect", "status"],
                                     ["objectstore", "start"], ["objectstore", "stop"], ["objectstore", "status"],
                                     ["cdc", "simulate"]])
def test_every_command_has_help(command):
    result = invoke_kappa(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


@pytest.mark.parametrize("args, option", [
    (["bench", "--conf", "spark.sql.shuffle.partitions"], "--conf"),
    (["bench", "--trigger", "soon"], "--trigger"),
    (["bench", "--partitions", "0"], "--partitions"),
    (["bench", "--events", "-5"], "--events"),
    (["bench", "nexmark", "--queries", ","], "--queries"),
    (["bench", "nexmark", "--rate", "0"], "--rate"),
    (["bench", "nexmark", "--trigger", "soon"], "--trigger"),
    (["chaos", "driver", "--rate", "0"], "--rate"),
    (["chaos", "broker", "--limit", "0"], "--limit"),
    (["chaos", "driver", "--trigger", "soon"], "--trigger"),
])
def test_bad_bench_and_chaos_options_are_refused_before_anything_starts(args, option):
    result = invoke_kappa(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert option in result.stderr and "Traceback" not in result.stderr


def test_an_unknown_nexmark_query_is_one_line_naming_it():
    result = invoke_kappa("bench", "nexmark", "--queries", "q0,q9")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "'q9' is not declared" in result.stderr and "Traceback" not in result.stderr


def test_status_json_reports_the_running_broker(broker_settings):
    result = invoke_kappa("kafka", "status", "--format", "json", env=env_for(broker_settings))
    status = json.loads(result.stdout)
    assert status["up"] is True and status["bootstrap_servers"] == broker_settings.bootstrap_servers


def test_second_start_is_a_clear_error(broker_settings):
    result = invoke_kappa("kafka", "start", env=env_for(broker_settings))
    assert result.returncode == 1
    assert "already running" in result.stderr and "Traceback" not in result.stderr


def test_stop_when_not_running_is_a_clear_error(tmp_path):
    result = invoke_kappa("kafka", "stop", env={"KAPPA_HOME": str(tmp_path)})
    assert result.returncode == 1 and "not running" in result.stderr and "Traceback" not in result.stderr


def test_start_on_a_taken_port_is_a_clear_error(tmp_path, broker_settings):
    result = invoke_kappa("kafka", "start", env={"KAPPA_HOME": str(tmp_path), "KAPPA_KAFKA_PORT": str(broker_settings.kafka_port),
                                          "KAPPA_KAFKA_CONTROLLER_PORT": str(free_port())})
    assert result.returncode == 1
    assert f"port {broker_settings.kafka_port}" in result.stderr and "already in use" in result.stderr


def test_start_without_java_is_a_clear_error(tmp_path):
    result = invoke_kappa("kafka", "start", env={"KAPPA_HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent),
                                          "KAPPA_KAFKA_PORT": str(free_port()), "KAPPA_KAFKA_CONTROLLER_PORT": str(free_port())})
    assert result.returncode == 1 and "Java is not installed" in result.stderr


def test_broken_asset_yaml_fails_naming_file_and_field(make_env):
    settings, _ = make_env()
    path = settings.assets_dir / "flights" / "flights.yaml"
    path.write_text(path.read_text().replace("layer: silver", "layer: silverish"))
    result = invoke_kappa("assets", env=env_for(settings))
    assert result.returncode == 1
    assert f"{path}: layer: Input should be" in result.stderr.replace("\n", "") and "Traceback" not in result.stderr
    # an expectation Great Expectations refuses the arguments of: named by file, item and field
    doc = yaml.safe_load(path.read_text().replace("layer: silverish", "layer: silver"))
    doc["expectations"].insert(0, {"expect_column_values_to_not_be_null": {"column": "event_id", "mostly": 2}})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = invoke_kappa("assets", env=env_for(settings))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (f"{path}: expectations.0: expect_column_values_to_not_be_null: mostly: ensure this value is less than "
            "or equal to 1.0") in result.stderr.replace("\n", ""), result.stderr


@pytest.mark.spark
def test_bad_sql_prints_sparks_message_not_a_traceback(tmp_path):
    result = kappa("sql", "SELECT * FROM no_such_table", env={"KAPPA_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert "TABLE_OR_VIEW_NOT_FOUND" in result.stderr and "Traceback" not in result.stderr


# Lines only Spark's side writes: log4j2 (resources/log4j2.properties: "HH:mm:ss LEVEL Class: …"),
# the JVM launcher, the TransformWithStateInPandas driver worker's prints, py4j's logging and
# librdkafka's default log line ("%4|<ts>|GETPID|rdkafka#producer-1| …").
NOT_KAPPA = re.compile(r"^\d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) |^WARNING: |TransformWithStateInPandas"
                       r"|py4j|^%\d\|", re.MULTILINE)


@pytest.mark.spark
def test_a_continuous_run_shows_kappas_progress_only_and_stops_cleanly_on_sigint(make_env):
    """`kappa run --continuous` of silver and a stateful asset (pattern: transformWithStateInPandas,
    whose Python worker prints its start-up) shows Kappa's progress only; Spark's JVM, its Python
    worker and the libraries log to <KAPPA_HOME>/logs/kappa-<pid>.log. SIGINT, once the pattern has
    run a micro-batch, stops both queries between micro-batches and exits 0."""
    from .helpers import ingest

    settings, suffix = make_env()
    ingest(settings, suffix, limit=300)
    proc = subprocess.Popen([KAPPA, "run", "flights", "delay_streaks", "--continuous"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **env_for(settings), "COLUMNS": "200"},
                            cwd=REPO)
    try:
        # Spark, two queries and a Python worker: ~50 s on 2 cores at load 2-3, minutes at load 15.
        deadline = time.monotonic() + 420
        silver = Path(settings.warehouse) / "flights" / "v1" / "_delta_log"
        pattern = Path(settings.checkpoints) / "delay_streaks" / "v1" / "commits"
        while not (any(silver.glob("*1.json")) and (pattern / "0").exists()):  # both ran a batch
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "no batch committed"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        console, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, console
    assert "SIGINT: stopping the queries" in console and "Traceback" not in console
    [stopped] = re.findall(r"^stopped: (.*)$", console, re.MULTILINE)
    assert sorted(stopped.split(", ")) == ["delay_streaks_v1", "flights_v1"], stopped
    assert "flights: batch 0 300 records" in console
    assert NOT_KAPPA.findall(console) == [], console
    [log] = (settings.home / "logs").glob("kappa-*.log")
    text = log.read_text()
    assert "Starting Streaming TransformWithStateInPandas Python worker" in text  # the worker's stdout
    assert "WARNING: Using incubator modules" in text  # the JVM's stderr
    assert re.search(r"^\d\d:\d\d:\d\d WARN \w+: ", text, re.MULTILINE), text  # log4j2 (SparkStringUtils)


def test_run_until_caught_up_prints_each_batch_the_results_and_the_time(make_env, spark):
    """`kappa run --until-caught-up` to its end, in this process (the session's Spark: a new driver
    would only add its start-up; the console of a subprocess run is the test above)."""
    from typer.testing import CliRunner

    from kappa.cli.app import app

    from .helpers import ingest

    settings, suffix = make_env()
    ingest(settings, suffix, limit=300)
    done = CliRunner().invoke(app, ["run", "flights", "--until-caught-up"], env={**env_for(settings), "COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "flights: batch 0 300 records" in done.output
    assert re.search(r"flights\W+v1\W+300\W+300\W", done.output), done.output  # the results table: rows, read
    assert re.search(r"^caught up in \d+\.\d s$", done.output, re.MULTILINE), done.output


def test_a_bounded_run_moves_the_stable_names_unless_told_to_keep_them(make_env, spark):
    """Issue 46 item 6: after `kappa run --until-caught-up`, a promoted asset's stable name reads
    what the run committed (the cut advanced in one registry commit, as `kappa advance` does);
    with `--keep-names` it stays at its pinned snapshot; with nothing promoted, no word of names."""
    from typer.testing import CliRunner

    from kappa.analytics.sql import run_sql
    from kappa.cli.app import app
    from kappa.delta.registry import Registry
    from kappa.ingest.events import Events
    from kappa.ingest.nycflights13 import load_events, publish
    from kappa.lifecycle.cut import advance

    from .helpers import renamed, table

    settings, suffix = make_env()
    flights = next(e for e in renamed(load_events(limit=500), suffix) if e.topic == f"flights_{suffix}")

    def publish_part(lo: int, hi: int) -> None:
        publish(settings, [Events(topic=flights.topic, keys=flights.keys[lo:hi], values=flights.values[lo:hi],
                                  timestamps_ms=flights.timestamps_ms[lo:hi], event_ids=flights.event_ids[lo:hi])])

    def run(*extra: str) -> str:
        done = CliRunner().invoke(app, ["run", "flights", "--until-caught-up", *extra],
                                  env={**env_for(settings), "COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        return done.output

    def named() -> int:
        return int(run_sql(spark, settings, "SELECT count(*) AS n FROM flights")["n"][0])

    publish_part(0, 300)
    assert "stable name" not in run()  # nothing promoted
    Registry(settings).promote({"flights": 1})
    advance(settings, wait_s=0.0)
    pinned = Registry(settings).promoted("flights").snapshot
    before = named()
    assert pinned is not None and before == len(table(settings, "flights"))

    publish_part(300, 500)
    out = run("--keep-names")
    assert "stable name" not in out and "flights: batch" in out
    assert Registry(settings).promoted("flights").snapshot == pinned and named() == before
    grown = len(table(settings, "flights"))
    assert grown > before

    out = run()
    moved = Registry(settings).promoted("flights").snapshot
    assert moved > pinned and f"stable name flights: Delta version {pinned} -> {moved}" in out, out
    assert named() == grown


def test_a_continuous_run_moves_the_stable_names_on_its_interval(make_env, spark):
    """`kappa run --continuous`'s interval (its NameMover, on run_continuous's poll): a promoted
    asset's stable name follows what the running query commits, without `kappa advance`."""
    import threading

    from kappa.cli.app import NameMover
    from kappa.delta.registry import Registry
    from kappa.ingest.events import Events
    from kappa.ingest.nycflights13 import load_events, publish
    from kappa.lifecycle.cut import advance
    from kappa.runners import run_until_caught_up
    from kappa.runners.local import run_continuous

    from .helpers import renamed, table

    settings, suffix = make_env()
    flights = next(e for e in renamed(load_events(limit=400), suffix) if e.topic == f"flights_{suffix}")

    def publish_part(lo: int, hi: int) -> None:
        publish(settings, [Events(topic=flights.topic, keys=flights.keys[lo:hi], values=flights.values[lo:hi],
                                  timestamps_ms=flights.timestamps_ms[lo:hi], event_ids=flights.event_ids[lo:hi])])

    publish_part(0, 200)
    run_until_caught_up(settings, ["flights"], spark=spark)
    Registry(settings).promote({"flights": 1})
    advance(settings, wait_s=0.0)
    pinned = Registry(settings).promoted("flights").snapshot
    stop, failed = threading.Event(), []

    def body() -> None:
        try:
            run_continuous(settings, ["flights"], stop=stop, spark=spark, poll_s=1.0,
                           on_poll=NameMover(settings, ["flights"], every_s=2.0))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    runner = threading.Thread(target=body, daemon=True)
    runner.start()
    try:
        publish_part(200, 400)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not failed:
            snapshot = Registry(settings).promoted("flights").snapshot
            rows = len(table(settings, "flights"))
            if snapshot > pinned and rows > 300:
                break
            time.sleep(2)
    finally:
        stop.set()
        runner.join(120)
    assert not failed, failed
    moved = Registry(settings).promoted("flights")
    assert moved.snapshot > pinned, "the name never moved while the query ran"
    from deltalake import DeltaTable

    assert len(DeltaTable(moved.table_path, version=moved.snapshot).to_pandas()) > 300


@pytest.mark.spark
def test_verbose_brings_sparks_output_back_to_the_console(tmp_path):
    result = kappa("--verbose", "sql", "SELECT 1 AS one", env={"KAPPA_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "WARNING: Using incubator modules" in result.stderr and "one" in result.stdout
    assert not (tmp_path / "logs").exists()


#: Every command that takes asset names, called with one the catalog lacks. The test below checks
#: that this is every such command of the app (a parameter named ``asset``, ``assets`` or, for a
#: declaration, ``name``), so a new command is swept too.
UNKNOWN_NAME_CALLS = {
    "run": ["run", "nosuch", "--until-caught-up"], "replay": ["replay", "nosuch"],
    "gate": ["gate", "nosuch", "1"], "promote": ["promote", "nosuch", "1"], "rollback": ["rollback", "nosuch"],
    "advance": ["advance", "nosuch"], "versions": ["versions", "nosuch"], "status": ["status", "nosuch"],
    "maintain": ["maintain", "nosuch"], "declarations retire": ["declarations", "retire", "nosuch"],
    "declarations evolve": ["declarations", "evolve", "nosuch"],
}


def test_the_unknown_name_sweep_covers_every_command_that_takes_an_asset():
    import typer

    from kappa.cli.app import app

    def commands(group, path=()):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from commands(command, (*path, name))
            else:
                yield " ".join((*path, name)), {p.name for p in command.params}

    named = {path for path, params in commands(typer.main.get_command(app))
             if params & {"asset", "assets"} or (path.startswith("declarations ") and "name" in params)}
    assert named == set(UNKNOWN_NAME_CALLS), named ^ set(UNKNOWN_NAME_CALLS)


@pytest.mark.parametrize("command", sorted(UNKNOWN_NAME_CALLS))
def test_a_name_the_catalog_lacks_is_one_line_naming_it(command, tmp_path):
    # in an empty warehouse: the name is neither declared nor in the registry
    result = invoke_kappa(*UNKNOWN_NAME_CALLS[command], env={"KAPPA_HOME": str(tmp_path)})
    out = (result.stdout + result.stderr).strip()
    assert result.returncode == 1 and "Traceback" not in out, out
    # retire acts on the declarations log; evolve, like the others, on any asset the catalog declares
    expected = ("no active declaration named 'nosuch'" if command == "declarations retire"
                else "unknown asset 'nosuch' (known: ")
    assert len(out.splitlines()) == 1 and expected in out, out
