"""Ground truth for the CDC tests, computed without Spark: PostgreSQL's tables read with psycopg,
and changelog topics folded by key with confluent-kafka (the latest value of each key; a tombstone
or a delete removes it)."""

from __future__ import annotations

import datetime as dt
import json
import time

from confluent_kafka import Consumer, TopicPartition

from kappa.cdc import postgres
from kappa.cdc.operational import PRIMARY_KEYS
from kappa.config import Settings

EPOCH = dt.date(1970, 1, 1)


def pg_rows(settings: Settings, table: str) -> dict[tuple, dict]:
    """``SELECT * FROM table`` keyed by primary key; dates as days since the epoch (Debezium's
    io.debezium.time.Date)."""
    with postgres.connect(settings) as conn:
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d.name for d in cur.description]
        out = {}
        for row in cur:
            rec = {c: ((v - EPOCH).days if isinstance(v, dt.date) else v) for c, v in zip(cols, row)}
            out[tuple(rec[k] for k in PRIMARY_KEYS[table])] = rec
        return out


def read_topic(settings: Settings, topic: str, timeout_s: float = 30.0) -> list:
    """Every record of partition 0 of ``topic`` from its log start to its end: (offset, key, value)."""
    c = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "cdc-test", "enable.auto.commit": False})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        c.assign([TopicPartition(topic, 0, lo)])
        out = []
        deadline = time.monotonic() + timeout_s
        while (not out or out[-1][0] < hi - 1) and hi > lo:
            m = c.poll(1.0)
            if m is None or m.error():
                assert time.monotonic() < deadline, f"{topic}: read {len(out)} of {hi - lo} records"
                continue
            out.append((m.offset(), json.loads(m.key()), json.loads(m.value()) if m.value() is not None else None))
        return out
    finally:
        c.close()


def fold(records: list) -> dict[tuple, dict]:
    """The table a changelog describes: the last ``after`` image per key; deletes and tombstones
    remove the key."""
    state: dict[tuple, dict] = {}
    for _, key, value in records:
        k = tuple(key.values())
        if value is None or value["op"] == "d":
            state.pop(k, None)
        else:
            state[k] = value["after"]
    return state


def wait_topic_equals_table(settings: Settings, table: str, timeout_s: float = 60.0) -> dict:
    """Wait until folding ``ops.public.<table>`` gives PostgreSQL's table; returns the table."""
    deadline = time.monotonic() + timeout_s
    while True:
        expected = pg_rows(settings, table)
        got = fold(read_topic(settings, f"ops.public.{table}"))
        if got == expected:
            return expected
        if time.monotonic() > deadline:
            missing = set(expected) - set(got)
            extra = set(got) - set(expected)
            differ = [k for k in set(got) & set(expected) if got[k] != expected[k]][:3]
            raise AssertionError(f"{table}: topic differs from PostgreSQL: {len(missing)} keys missing, "
                                 f"{len(extra)} extra, e.g. differing {[(got[k], expected[k]) for k in differ]}")
        time.sleep(1.0)


def assert_equals_postgres(settings: Settings, table: str, got: dict[tuple, dict], expected: dict[tuple, dict],
                     what: str) -> None:
    """``got`` (a folded topic or a Delta table) equals PostgreSQL's ``expected``; otherwise fail
    naming the keys missing, extra and differing, each with the changelog's records of that key
    (offset, op, LSN, after image), so a failure in CI says which change went where."""
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    differ = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    if not (missing or extra or differ):
        return
    history = {}
    for offset, key, value in read_topic(settings, f"ops.public.{table}"):
        k = tuple(key.values())
        if k in set(missing[:3] + extra[:3] + differ[:3]):
            history.setdefault(k, []).append(
                (offset, None, None, None) if value is None else
                (offset, value["op"], value["source"].get("lsn"), value["after"]))
    lines = [f"{what}: {len(missing)} keys missing, {len(extra)} extra, {len(differ)} differ"]
    quarantined = _quarantined_keys(settings, f"ops.public.{table}")
    for label, keys in (("missing", missing), ("extra", extra), ("differs", differ)):
        for k in keys[:3]:
            lines.append(f"  {label} {k}: got {got.get(k)} expected {expected.get(k)}; changelog {history.get(k)}; "
                         f"quarantined {quarantined.get(k, [])}")
    raise AssertionError("\n".join(lines))


def _quarantined_keys(settings: Settings, topic: str) -> dict[tuple, list]:
    """Key -> (asset, version, offset, reason) of every quarantined record of ``topic``."""
    from deltalake import DeltaTable

    from kappa.delta.registry import quarantine_path

    path = str(quarantine_path(settings))
    if not DeltaTable.is_deltatable(path):
        return {}
    q = DeltaTable(path).to_pandas()
    out: dict[tuple, list] = {}
    for r in q[q["topic"] == topic].itertuples():
        try:
            k = tuple(json.loads(r.key).values())
        except (TypeError, ValueError, AttributeError):
            continue
        out.setdefault(k, []).append((r.asset, r.version, r.offset, r.reason))
    return out


def wait_records(settings: Settings, topic: str, match, count: int = 1, from_offset: int = 0,
                 timeout_s: float = 60.0) -> list:
    """Wait until ``topic`` holds at least ``count`` records at or after ``from_offset`` for which
    ``match((offset, key, value))`` is true; returns them (offset order)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in read_topic(settings, topic) if r[0] >= from_offset and match(r)]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: {len(found)} of {count} matching records after {timeout_s:.0f} s")
        time.sleep(0.5)


def delta_rows(settings: Settings, asset: str, table: str, pinned: bool = False) -> dict[tuple, dict]:
    """The latest version of ``asset`` (a current-state table of ``table``; ``pinned``: what its
    stable name reads, the promoted version's pinned snapshot) keyed by primary key, with
    PostgreSQL's columns only (metadata columns dropped), dates as days since the epoch and missing
    values as None, to compare with :func:`pg_rows`."""
    from deltalake import DeltaTable

    import kappa.tables
    from kappa.delta.registry import Registry

    df = (kappa.tables.dataset(asset, settings).to_table().to_pandas() if pinned else
          DeltaTable(Registry(settings).latest(asset).table_path).to_pandas())
    return frame_rows(df, table)


def frame_rows(df, table: str) -> dict[tuple, dict]:
    """Rows of ``df`` (a Delta table of PostgreSQL's ``table`` as pandas) keyed by primary key, as
    :func:`delta_rows` gives them."""
    cols = [c for c in df.columns if not c.startswith("_")]
    out = {}
    for rec in df[cols].astype(object).to_dict("records"):
        rec = {c: (None if v is None or v != v else (v - EPOCH).days if isinstance(v, dt.date) else
                   int(v) if isinstance(v, float) and v.is_integer() and c not in ("lat", "lon") else v)
               for c, v in rec.items()}
        out[tuple(rec[k] for k in PRIMARY_KEYS[table])] = rec
    return out


def fleet_by_airline_of(fleet: dict, airlines: dict, planes: dict) -> dict[str, tuple]:
    """fleet_by_airline's SQL (``FLEET_BY_AIRLINE_SQL``) over rows keyed as :func:`pg_rows` gives
    them: carrier -> (airline name, fleet rows, their planes' seats or None)."""
    out: dict[str, tuple] = {}
    for (tailnum,), f in fleet.items():
        airline = airlines.get((f["carrier"],))
        if airline is None:
            continue
        seats = (planes.get((tailnum,)) or {}).get("seats")
        _, n, total = out.get(f["carrier"], (None, 0, None))
        out[f["carrier"]] = (airline["name"], n + 1, total if seats is None else (total or 0) + seats)
    return out


def view_rows(df) -> dict[str, tuple]:
    """fleet_by_airline's rows (pandas) as :func:`fleet_by_airline_of` gives them."""
    return {r.carrier: (r.airline_name, int(r.planes), None if r.seats != r.seats or r.seats is None else int(r.seats))
            for r in df.itertuples()}
