"""The consistent cut (kappa.lifecycle.cut) on the analysts' state with its running endpoint:
ingestion goes on while flights, weather, departures_hourly and flights_weather run continuously;
a promotion pins one cut, and departures_hourly at its snapshot equals an independent computation
over flights at its snapshot, through `kappa serve` and through kappa.tables; `kappa advance` moves
the cut and the equality holds again. Runs after test_serve.py (the analysts' state is used last)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pandas as pd

from kappa.delta.registry import Registry
from kappa.ingest.nycflights13 import load_events, publish

from ..integration.helpers import assert_departures_equal, renamed
from .conftest import SLICE, hive_connect, kappa

LINEAGE = ("flights", "weather", "departures_hourly", "flights_weather")
#: Rows published per topic after the analysts' slice: up to CHUNKS chunks, one every PAUSE_S
#: seconds, until the test has advanced the cut.
CHUNK, CHUNKS, PAUSE_S = 200, 60, 4.0

#: departures_hourly computed in SQL from the flights stable name (rounded: an incremental and a
#: one-pass average may differ in the last bits).
DEPARTURES_SQL = """
SELECT origin, window(event_time, '1 hour').start AS window_start, count(*) AS flights,
       count_if(dep_time IS NULL) AS cancelled,
       round(avg(CASE WHEN dep_time IS NOT NULL THEN dep_delay END), 6) AS avg_dep_delay_min
FROM flights GROUP BY origin, window(event_time, '1 hour')"""
GOLD_SQL = "SELECT origin, window_start, flights, cancelled, round(avg_dep_delay_min, 6) FROM departures_hourly"


def hive(port: int, sql: str) -> list[tuple]:
    with hive_connect(port) as conn:
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchall()


def expected_departures(flights: pd.DataFrame) -> pd.DataFrame:
    """departures_hourly's definition (assets/flights/departures_hourly.yaml) in pandas."""
    f = flights.assign(window_start=pd.to_datetime(flights.event_time, utc=True).dt.floor("1h"))
    f["delay"] = f.dep_delay.where(f.dep_time.notna())
    g = f.groupby(["origin", "window_start"], as_index=False).agg(
        flights=("event_time", "size"), cancelled=("dep_time", lambda s: int(s.isna().sum())),
        avg_dep_delay_min=("delay", "mean"))
    g["window_end"] = g.window_start + pd.Timedelta(hours=1)
    return g[["origin", "window_start", "window_end", "flights", "cancelled", "avg_dep_delay_min"]]


def assert_the_cut_holds(settings, port: int, topic: str) -> dict[str, dict]:
    """Every name of the lineage pinned and verified; departures_hourly equals the computation over
    flights, through kappa.tables (delta-rs) and through the endpoint; flights_weather holds only
    flights of the pinned flights. Returns the pins."""
    import kappa.tables

    registry = Registry(settings)
    pins = {a: registry.promoted(a).pin for a in LINEAGE}
    assert all(p is not None and p["verified"] for p in pins.values()), pins
    assert pins["departures_hourly"]["reads"] == {"flights": pins["flights"]["snapshot"]}
    assert pins["flights_weather"]["reads"] == {"flights": pins["flights"]["snapshot"],
                                                "weather": pins["weather"]["snapshot"]}
    assert pins["departures_hourly"]["cut"] == pins["flights"]["cut"] == pins["flights"]["offsets"]

    flights = kappa.tables.dataset("flights", settings).to_table().to_pandas()
    gold = kappa.tables.dataset("departures_hourly", settings).to_table().to_pandas()
    # silver holds a row per record of the flights topic below the cut, but for events behind its
    # watermark (kept in late_events): the new chunks' events interleave a little with the slice's
    assert SLICE < len(flights) <= sum(pins["flights"]["offsets"][topic].values())
    assert_departures_equal(gold[["origin", "window_start", "window_end", "flights", "cancelled",
                                  "avg_dep_delay_min"]], expected_departures(flights))
    joined = kappa.tables.dataset("flights_weather", settings).to_table(columns=["event_id"]).to_pandas()
    assert set(joined.event_id) <= set(flights.event_id)

    assert hive(port, "SELECT count(*) FROM flights")[0][0] == len(flights)
    assert hive(port, f"SELECT count(*) FROM ({GOLD_SQL} EXCEPT {DEPARTURES_SQL})")[0][0] == 0
    assert hive(port, f"SELECT count(*) FROM ({DEPARTURES_SQL} EXCEPT {GOLD_SQL})")[0][0] == 0
    return pins


def assert_an_unpromoted_name_fails_in_one_line(settings, port: int, spark, version) -> None:
    import pytest

    import kappa.tables
    from kappa.analytics.sql import QueryError, run_sql
    from kappa.delta.registry import RegistryError

    line = (f"origin_load has no promoted version (versions: v{version.version} (created)); "
            f"promote one with `kappa promote origin_load {version.version}`")
    with pytest.raises(RegistryError) as raised:
        kappa.tables.open("origin_load", settings)
    assert str(raised.value) == line
    with pytest.raises(QueryError) as raised:
        run_sql(spark, settings, "SELECT count(*) FROM origin_load")
    assert str(raised.value) == line
    with pytest.raises(Exception) as raised:  # through the endpoint: Hive's error carries the line
        hive(port, "SELECT count(*) FROM origin_load")
    assert line in str(raised.value)


def test_a_promoted_cut_agrees_through_serve_and_tables_and_advance_moves_it(served, analysts_state, spark):
    from kappa.lifecycle.promotion import commit_promotion
    from kappa.runners.local import LocalRunner
    from kappa.spec import load_catalog

    settings, port = served
    _, suffix = analysts_state
    registry = Registry(settings)
    catalog = load_catalog(settings.assets_dir)
    took, t0 = {}, time.monotonic()
    # the promoted versions run (earlier tests left newer, rolled-back versions behind them)
    versions = {a: registry.promoted(a) for a in LINEAGE[:3]}
    versions["flights_weather"] = registry.create_version(
        "flights_weather", catalog["flights_weather"].fingerprint(),
        {"flights": versions["flights"].version, "weather": versions["weather"].version}, reason="test")
    # load_events orders the first N rows by event time, so a longer prefix interleaves with the
    # slice: the new chunks are its events after the slice's last event time (none behind the watermark)
    last = {e.topic: int(e.timestamps_ms.max()) for e in load_events(limit=SLICE)}
    tail = []
    for e in load_events(limit=SLICE + CHUNK * CHUNKS):
        keep = [i for i, t in enumerate(e.timestamps_ms) if t > last[e.topic]]
        tail.append(dataclasses.replace(e, keys=[e.keys[i] for i in keep], values=[e.values[i] for i in keep],
                                        timestamps_ms=e.timestamps_ms[keep], event_ids=[e.event_ids[i] for i in keep]))
    tail = renamed(tail, suffix)

    def chunk(i: int) -> list:
        return [dataclasses.replace(e, keys=e.keys[i * CHUNK:(i + 1) * CHUNK], values=e.values[i * CHUNK:(i + 1) * CHUNK],
                                    timestamps_ms=e.timestamps_ms[i * CHUNK:(i + 1) * CHUNK],
                                    event_ids=e.event_ids[i * CHUNK:(i + 1) * CHUNK]) for e in tail]

    published, enough = threading.Event(), threading.Event()

    def ingest_continuously() -> None:
        for i in range(CHUNKS):
            if enough.is_set():
                return
            publish(settings, chunk(i))
            enough.wait(PAUSE_S)
        published.set()

    from deltalake import DeltaTable

    # a version that is never promoted: its stable name fails in one line everywhere
    unpromoted = registry.create_version("origin_load", catalog["origin_load"].fingerprint(),
                                         {"flights": versions["flights"].version}, reason="test")
    before = DeltaTable(versions["flights"].table_path).version()  # flights' table before the new chunks
    runner = LocalRunner(settings, spark=spark)
    producer = threading.Thread(target=ingest_continuously, daemon=True)
    took["prepare"], t0 = time.monotonic() - t0, time.monotonic()
    try:
        for name in LINEAGE:
            runner.start(catalog[name], versions[name], bounded=False)
        producer.start()
        took["start"], t0 = time.monotonic() - t0, time.monotonic()
        # both readers of flights have read some new chunks: then the cut, while chunks still arrive
        deadline = time.monotonic() + 180
        while not all(_read_past(settings, versions[d], before) for d in ("departures_hourly", "flights_weather")):
            assert time.monotonic() < deadline, "the readers of flights did not read the new chunks within 180 s"
            time.sleep(1)
        took["read new chunks"], t0 = time.monotonic() - t0, time.monotonic()
        commit_promotion(settings, {"flights_weather": versions["flights_weather"].version}, reason="test")
        assert not published.is_set(), "ingestion ended before the cut: the test would not show a live cut"
        first = assert_the_cut_holds(settings, port, f"flights_{suffix}")
        assert_an_unpromoted_name_fails_in_one_line(settings, port, spark, unpromoted)
        took["cut and checks"], t0 = time.monotonic() - t0, time.monotonic()

        # more chunks arrive and both readers of flights read past the first cut's flights snapshot
        # (what lets the advance move both): polled, bounded
        deadline = time.monotonic() + 180
        while not all(_read_past(settings, versions[d], first["flights"]["snapshot"])
                      for d in ("departures_hourly", "flights_weather")):
            assert time.monotonic() < deadline, "the readers of flights did not read past the first cut within 180 s"
            time.sleep(1)
        took["more chunks"], t0 = time.monotonic() - t0, time.monotonic()
        advanced = kappa(settings, "advance", "--format", "json")
        assert advanced.returncode == 0, advanced.stdout + advanced.stderr
        moved = json.loads(advanced.stdout)["moved"]
        took["advance"], t0 = time.monotonic() - t0, time.monotonic()
        second = assert_the_cut_holds(settings, port, f"flights_{suffix}")
        assert second["flights"]["snapshot"] > first["flights"]["snapshot"] and "flights" in moved
        assert second["departures_hourly"]["snapshot"] > first["departures_hourly"]["snapshot"]
        status = json.loads(kappa(settings, "versions", "departures_hourly", "--format", "json").stdout)
        promoted = [r for r in status if r["state"] == "promoted"][0]
        assert promoted["snapshot"] == second["departures_hourly"]["snapshot"]
        assert promoted["cut"] == second["flights"]["offsets"]
        assert not published.is_set(), "ingestion ended before the advance: the test would not show a live cut"
        took["checks again"], t0 = time.monotonic() - t0, time.monotonic()
    finally:
        enough.set()
        for name in LINEAGE:
            runner.stop(name, versions[name].version)
        producer.join(timeout=CHUNKS * PAUSE_S + 60)
    took["stop"] = time.monotonic() - t0
    print("\nseconds: " + ", ".join(f"{k} {v:.0f}" for k, v in took.items()))


def _read_past(settings, version, flights_version: int) -> bool:
    """Whether a micro-batch of ``version`` read flights through a Delta version after ``flights_version``."""
    from kappa.streaming.provenance import batch_commits

    return any((c.reads("flights", version.upstream["flights"])[0] or -1) > flights_version
               for c in batch_commits(settings, version)[1])
