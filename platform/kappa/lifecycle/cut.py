"""The cut: which Delta version of each promoted table the stable names read, chosen so that every
pinned table covers exactly what the pinned tables it was computed from hold.

A stable name does not read its version's latest commit: it reads the **snapshot** pinned when the
version was promoted (or when the cut was last advanced). The snapshots of one lineage (``flights``
and everything promoted that reads it, transitively, and everything those read) are chosen together
from the provenance each micro-batch commit carries (:mod:`kappa.streaming.provenance`):

* every asset's snapshot is the last Delta version at or after one of its micro-batch commits and
  before the next (later commits that are not micro-batches — OPTIMIZE, a forget's DELETE — are
  included: they change files, not what the table covers);
* for every pinned asset D reading a pinned asset U (a Delta source), D's chosen micro-batch read
  U *completely* through a Delta version of U whose last micro-batch commit is U's chosen one. So
  ``departures_hourly`` at its snapshot was computed from exactly the ``flights`` rows that
  ``flights`` at its snapshot holds, and two readers of ``flights`` agree on which ``flights``.

The choice is a fixed point: start every asset at its latest micro-batch; while a reader requires
an earlier upstream batch than the upstream's choice, move the upstream back; while a reader's
choice read more than its upstream's choice, move the reader back to its latest batch that did not.
Choices only move back, so this ends: at a consistent cut (the latest one the commits retained
allow), or at an asset with no such batch, and then the cut is refused (:class:`CutError`, naming
both assets and what each covers).

The cut's **source-offset watermark** (``cut`` in a pin) is, per asset, the Kafka end offsets its
snapshot covers, its own sources merged with its upstreams' (topic -> partition -> offset,
exclusive). Assets reading the same topic without a lineage between them (``flights_bronze`` and
``flights``) are separate cuts: each records its own offsets, and they agree only when both have
read to the same point. Inside one lineage they must agree: an asset that reads a topic partition
through two pins (or itself and a pin) covering different offsets has no single watermark, and
the cut is refused (:class:`CutError`; ``kappa promote``/``advance`` wait and try again).

What is not constrained, and says so (``verified`` false in the pin): a version without a table or
without a micro-batch commit yet (nothing recorded to pin by); a version whose commits do not
record their sources (a commit of Delta's streaming sink, which wrote the append kinds before
:class:`kappa.streaming.writers.AppendWriter`, once Spark has purged the batch's write-ahead log
entry, after ``spark.sql.streaming.minBatchesToRetain`` batches), and the table side of a ``lookup``
(stream–table join), which each micro-batch reads as it is then, not as a streaming source; and
anything reading an unverified pin. Such a pin also carries ``why_unverified`` (one line naming
the asset and what was not evaluated; :func:`unverified` collects them), which ``kappa promote``,
``kappa advance``, ``kappa versions``/``status --format json`` and the Dagster promote and advance
jobs show: an unverified pin is "not evaluated", never reported as consistent.

Sources: the Delta protocol ("Commit Provenance Information", time travel ``VERSION AS OF``);
Spark's write-ahead log (Structured Streaming guide, "Recovering from Failures with
Checkpointing"); DDIA ch. 11, "Keeping Systems in Sync" (a consistent snapshot across derived data).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from kappa.config import Settings
from kappa.delta.registry import Registry, Version
from kappa.errors import KappaError
from kappa.spec import upstream_first
from kappa.streaming.provenance import BatchCommit, batch_commits

#: How many of a table's latest commits the cut looks at for a micro-batch to pin.
HISTORY_LIMIT = 500


class CutError(KappaError, RuntimeError):
    """No consistent cut exists over the retained commits (the message names the assets and what
    each covers)."""


@dataclass
class CutTable:
    """One asset version as the cut sees it: its latest Delta version, its micro-batch commits
    (oldest first) and the upstream assets inside the cut it reads as streaming sources."""

    version: Version
    latest: int
    commits: list[BatchCommit]
    #: Upstream asset names inside the cut whose Delta version a batch records (the constraints).
    ups: list[str] = field(default_factory=list)
    #: Upstream asset names inside the cut read as a lookup's table side (no batch records them:
    #: not constrained, so the pin is not verified), set by :func:`solve`.
    table_sides: list[str] = field(default_factory=list)

    def eligible(self, i: int) -> bool:
        """Whether commit ``i`` records a complete read of every constrained upstream."""
        c = self.commits[i]
        if c.sources is None:
            return not self.ups
        return all(c.reads(u, self.version.upstream[u])[1] for u in self.ups)

    def last_eligible(self, at_most: int) -> int:
        """The latest eligible commit index ≤ ``at_most``, -1 if none."""
        for i in range(min(at_most, len(self.commits) - 1), -1, -1):
            if self.eligible(i):
                return i
        return -1

    def snapshot(self, i: int) -> int:
        """The Delta version pinned for commit ``i``: the last version before the next micro-batch
        commit (the latest for the last commit; the latest too when there is no commit)."""
        if i + 1 < len(self.commits):
            return self.commits[i + 1].table_version - 1
        return self.latest

    def batch_at(self, table_version: int) -> int:
        """Index of the last micro-batch commit at or before Delta version ``table_version`` (-1: none)."""
        found = -1
        for i, c in enumerate(self.commits):
            if c.table_version <= table_version:
                found = i
            else:
                break
        return found

    def describe(self, i: int) -> str:
        """``asset/vN batch B (Delta version V)`` for commit ``i``."""
        if i < 0:
            return f"{self.version.name} (no micro-batch)"
        c = self.commits[i]
        return f"{self.version.name} batch {c.batch_id} (Delta version {c.table_version})"


def lineages(settings: Settings, versions: dict[str, int], registry: Registry | None = None,
             events: list[dict] | None = None) -> list[list[str]]:
    """``versions`` (asset -> version) split into lineages: sets of assets connected by the
    upstream pins of those versions (either direction), each in the order given."""
    registry = registry or Registry(settings)
    events = events if events is not None else registry.events()
    edges = {a: {u for u, m in registry.version(a, n, events).upstream.items() if versions.get(u) == m}
             for a, n in versions.items()}
    groups: list[list[str]] = []
    seen: set[str] = set()
    for start in versions:
        if start in seen:
            continue
        group, todo = [], [start]
        while todo:
            a = todo.pop()
            if a in seen:
                continue
            seen.add(a)
            group.append(a)
            todo += [u for u in edges[a] if u not in seen] + [d for d, ups in edges.items() if a in ups and d not in seen]
        groups.append([a for a in versions if a in group])
    return groups


def plan_cut(settings: Settings, versions: dict[str, int], registry: Registry | None = None,
             events: list[dict] | None = None) -> dict[str, dict]:
    """The pins of one consistent cut over ``versions`` (asset -> version; every lineage in it is
    cut on its own): asset -> ``{"version", "snapshot", "batch_id", "reads", "offsets", "cut",
    "verified", "why_unverified", "held_back"}`` (see :mod:`kappa.delta.registry` for the fields;
    ``held_back``: :func:`held_back`, None at the latest micro-batch).

    A version without a table yet is pinned to nothing (``snapshot`` None: readers read its table
    as it comes) and is not verified, nor is anything reading it.

    Raises :class:`CutError` when no consistent cut exists over the last :data:`HISTORY_LIMIT`
    commits (naming the two assets that cannot be aligned)."""
    registry = registry or Registry(settings)
    events = events if events is not None else registry.events()
    tables: dict[str, CutTable] = {}
    pins: dict[str, dict] = {}
    for asset, number in versions.items():
        ver = registry.version(asset, number, events)
        latest, commits = batch_commits(settings, ver, HISTORY_LIMIT)
        if latest < 0:  # no table yet: nothing to pin; readers read it as it comes (not verified)
            pins[asset] = {"version": number, "snapshot": None, "batch_id": None, "reads": {}, "offsets": {},
                           "cut": {}, "verified": False,
                           "why_unverified": f"{ver.name}: consistency not evaluated: no table yet, nothing to "
                                             "pin (its stable name reads the table as it comes)"}
            continue
        tables[asset] = CutTable(ver, latest, commits, [u for u, n in ver.upstream.items() if versions.get(u) == n])
    no_table = {a: [u for u, n in t.version.upstream.items() if versions.get(u) == n and u not in tables]
                for a, t in tables.items()}
    for t in tables.values():
        t.ups = [u for u in t.ups if u in tables]
    choice, unconstrained = solve(tables)
    return pins | build_pins(tables, choice, unconstrained, no_table)


def build_pins(tables: dict[str, "CutTable"], choice: dict[str, int], unconstrained: set[str],
               no_table: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """The pins of :func:`solve`'s ``choice`` over ``tables`` (upstream first): asset -> ``{"version",
    "snapshot", "batch_id", "reads", "offsets", "cut", "verified", "why_unverified", "held_back"}``
    (``held_back``: :func:`held_back`). Pure.

    Raises :class:`CutError` when an asset reads one Kafka topic partition, itself or through its
    upstream pins, to two different offsets (two readers of one topic in a lineage not at one
    point: a cut with a single source-offset watermark does not exist there).

    ``verified`` is True only when the cut was evaluated for the asset and everything it reads:
    otherwise ``why_unverified`` says what was not evaluated (never that it is consistent): a
    version without a micro-batch commit; a pinned batch whose commit does not record what it read
    (Delta's streaming sink, its write-ahead log entry purged); an unconstrained reader
    (``unconstrained``: no batch records a complete read of its upstream); an upstream without a
    table (``no_table``: asset -> such upstream assets); the table side of a ``lookup``
    (:attr:`CutTable.table_sides`); an upstream whose own pin is not verified."""
    no_table = no_table or {}
    pins: dict[str, dict] = {}
    held = held_back(tables, choice, unconstrained)
    for asset in upstream_first({a: t.ups for a, t in tables.items()}):
        t, i = tables[asset], choice[asset]
        commit = t.commits[i] if i >= 0 else None
        reads = {u: tables[u].snapshot(choice[u]) for u in t.ups}
        offsets = commit.offsets if commit is not None else {}
        cut = {topic: dict(parts) for topic, parts in offsets.items()}
        through = {topic: {p: t.describe(i) for p in parts} for topic, parts in offsets.items()}
        for u in t.ups:
            for topic, parts in pins[u]["cut"].items():
                for part, offset in parts.items():
                    had = cut.setdefault(topic, {}).get(part)
                    if had is not None and had != offset:  # one topic read to two points: no cut
                        raise CutError(
                            f"no consistent cut: {t.version.name} reads topic {topic} partition {part} through "
                            f"{through[topic][part]} (to offset {had}) and through {tables[u].describe(choice[u])} "
                            f"(to offset {offset}); the assets reading {topic} have not read it to the same "
                            "point. Let their queries catch up to the log end (or stop ingesting) and try again")
                    cut[topic][part] = offset
                    through.setdefault(topic, {}).setdefault(part, tables[u].describe(choice[u]))
        why = _why_unverified(t, commit, asset in unconstrained, no_table.get(asset, []), pins)
        pins[asset] = {"version": t.version.version, "snapshot": t.snapshot(i),
                       "batch_id": commit.batch_id if commit else None, "reads": reads, "offsets": offsets,
                       "cut": cut, "verified": why is None, "why_unverified": why, "held_back": held.get(asset)}
    return pins


def held_back(tables: dict[str, "CutTable"], choice: dict[str, int], unconstrained: set[str]) -> dict[str, str]:
    """asset -> one line saying why :func:`solve`'s ``choice`` pins it before its latest micro-batch
    commit, and which reader holds it there: a reader whose chosen batch read it only that far; its
    own later batches reading an upstream partway into a Delta version (not complete: the line gives
    Delta's end position); or its later batches reading an upstream past that upstream's pin. Assets
    at their latest batch (or without one) are left out. Pure."""
    out: dict[str, str] = {}
    for a, t in tables.items():
        i, last = choice.get(a, -1), len(t.commits) - 1
        if i < 0 or i >= last:
            continue
        why = None
        for d, r in tables.items():
            if a not in r.ups or d in unconstrained or choice.get(d, -1) < 0:
                continue
            through, _ = r.commits[choice[d]].reads(a, r.version.upstream[a])
            if t.batch_at(through) == i:
                latest = choice[d] == len(r.commits) - 1
                why = (f"its reader {r.version.name} {_batch(r, choice[d])}, "
                       + ("its latest" if latest else "where that reader is held (see its held_back)")
                       + f", read it through Delta version {through}")
                break
        if why is None:
            why = _own_reason(tables, choice, a, last)
        out[a] = f"{t.version.name} held at {_batch(t, i)}, not its latest {_batch(t, last)}: {why}"
    return out


def _batch(t: "CutTable", i: int) -> str:
    """``batch B (Delta version V)`` for commit ``i`` of ``t``."""
    return f"batch {t.commits[i].batch_id} (Delta version {t.commits[i].table_version})"


def _own_reason(tables: dict[str, "CutTable"], choice: dict[str, int], a: str, j: int) -> str:
    """Why batch ``j`` of ``a`` is not chosen: an upstream read partway into a version, or past
    the upstream's pin."""
    t = tables[a]
    c = t.commits[j]
    for u in t.ups:
        through, complete = c.reads(u, t.version.upstream[u])
        if not complete:
            d = next((s["delta"] for s in c.sources or [] if (s.get("delta") or {}).get("asset") == u), {})
            return (f"its batch {c.batch_id} read {u} partway into Delta version {through} (Delta's end position "
                    f"{json.dumps(d.get('position'), sort_keys=True)} is not a version boundary), so it is not a "
                    f"complete read of any {u} version")
        up = tables[u]
        if up.batch_at(through) > choice[u]:
            return (f"its batch {c.batch_id} read {u} through Delta version {through}, past {u}'s pin at "
                    f"{up.describe(choice[u])} (see that pin's held_back)")
    return "no later batch is consistent with the pins it reads"


def _why_unverified(t: "CutTable", commit: BatchCommit | None, unconstrained: bool, no_table: list[str],
                    pins: dict[str, dict]) -> str | None:
    """Why the pin of ``t`` at ``commit`` is not verified (consistency not evaluated), None if it is."""
    reasons = []
    if commit is None:
        reasons.append(f"no micro-batch commit among its last {HISTORY_LIMIT} commits")
    elif commit.sources is None:
        reasons.append(f"batch {commit.batch_id} (Delta version {commit.table_version}) does not record what it "
                       "read: Delta's streaming sink wrote it and Spark has purged the batch's write-ahead log entry "
                       "(the checkpoint keeps the last spark.sql.streaming.minBatchesToRetain batches)")
    if unconstrained and commit is not None and commit.sources is not None:
        reasons.append("no retained micro-batch records a complete read of its upstream")
    reasons += [f"reads {u}, which has no table yet" for u in no_table]
    reasons += [f"reads {u} as a lookup's table side (each micro-batch reads the table as it then is; "
                f"the commits do not record which version)" for u in t.table_sides]
    reasons += [f"reads {u}, whose pin is not verified" for u in t.ups if u in pins and not pins[u]["verified"]]
    return None if not reasons else f"{t.version.name}: consistency not evaluated: " + "; ".join(reasons)


def unverified(pins: dict[str, dict | None]) -> dict[str, str]:
    """asset -> why its pin is not verified, for every pin in ``pins`` (asset -> pin, as recorded in
    the registry; None: never pinned, left out) whose consistency was not evaluated. A pin recorded
    without a reason (before reasons were kept) says so. Empty when every pin is verified."""
    return {a: p.get("why_unverified") or f"{a}: consistency not evaluated (no reason recorded with the pin)"
            for a, p in pins.items() if p is not None and not p.get("verified")}


def solve(tables: dict[str, "CutTable"]) -> tuple[dict[str, int], set[str]]:
    """The cut's fixed point (module docstring) over ``tables`` (asset -> its version, latest Delta
    version, micro-batch commits and in-cut upstreams): (asset -> chosen commit index, -1 for none;
    the assets left unconstrained because no commit records what they read). Pure. Raises
    :class:`CutError` naming the reader and upstream that cannot be aligned."""
    # A lookup's table side is not a streaming source: its batches do not record it (module docstring).
    for t in tables.values():
        recorded = [u for u in t.ups
                    if any(c.sources is None or c.reads(u, t.version.upstream[u])[0] is not None for c in t.commits)]
        if t.commits:  # without a commit nothing says how it reads (the pin names that instead)
            t.table_sides += [u for u in t.ups if u not in recorded and u not in t.table_sides]
        t.ups = recorded
    choice = {a: t.last_eligible(len(t.commits) - 1) for a, t in tables.items()}
    unconstrained = {a for a, t in tables.items() if t.commits and choice[a] < 0}  # nothing recorded
    for a in unconstrained:  # pinned at its latest; any of its commits may be an upstream's choice
        tables[a].ups = []
        choice[a] = len(tables[a].commits) - 1

    def required(reader: str, upstream: str) -> int:
        t = tables[reader]
        through, _ = t.commits[choice[reader]].reads(upstream, t.version.upstream[upstream])
        return tables[upstream].batch_at(through)

    for _ in range(10_000):
        changed = False
        for u, up in tables.items():
            readers = [d for d, t in tables.items() if u in t.ups and d not in unconstrained and choice[d] >= 0]
            if not readers:
                continue
            reqs = {d: required(d, u) for d in readers}
            target = min(min(reqs.values()), choice[u])
            moved = up.last_eligible(target) if target >= 0 else -1
            if moved != choice[u]:
                choice[u], changed = moved, True
            for d in readers:
                if reqs[d] == choice[u]:
                    continue
                t, i = tables[d], choice[d]
                while i >= 0 and (not t.eligible(i) or _req_at(tables, d, u, i) > choice[u]):
                    i -= 1
                if i < 0:
                    raise CutError(
                        f"no consistent cut: {t.version.name} has no micro-batch (among its last {HISTORY_LIMIT} "
                        f"commits) that read {up.describe(choice[u])} or less; its latest read "
                        f"{up.describe(reqs[d])}. Let the queries run (or stop ingesting) and try again")
                choice[d], changed = i, True
        if not changed:
            break
    return choice, unconstrained


def _req_at(tables: dict[str, CutTable], reader: str, upstream: str, i: int) -> int:
    t = tables[reader]
    through, _ = t.commits[i].reads(upstream, t.version.upstream[upstream])
    return tables[upstream].batch_at(through)


def plan_cut_waiting(settings: Settings, versions: dict[str, int], registry: Registry | None = None,
                     events: list[dict] | None = None, wait_s: float = 0.0, poll_s: float = 2.0) -> dict[str, dict]:
    """:func:`plan_cut`, tried again every ``poll_s`` seconds for up to ``wait_s`` seconds while it
    raises :class:`CutError`: readers of one upstream that run continuously agree on an upstream
    version again at their next micro-batches (processing-time triggers fire at multiples of their
    interval, so readers with one interval plan their batches together). Raises the last
    :class:`CutError`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return plan_cut(settings, versions, registry, events)
        except CutError:
            if time.monotonic() + poll_s > deadline:
                raise
            time.sleep(poll_s)


def cut_for(settings: Settings, targets: dict[str, int], registry: Registry | None = None,
            wait_s: float = 30.0) -> dict[str, dict]:
    """The pins a promotion of ``targets`` (asset -> version) commits: one cut over every lineage
    the targets join once promoted (the promoted versions of the other names in those lineages are
    re-pinned with them), waiting up to ``wait_s`` seconds for running readers to agree
    (:func:`plan_cut_waiting`). Raises :class:`CutError` as :func:`plan_cut`."""
    registry = registry or Registry(settings)
    events = registry.events()
    after = {a: v.version for a, v in registry.promoted_all().items()} | dict(targets)
    touched = [g for g in lineages(settings, after, registry, events) if set(g) & set(targets)]
    pins: dict[str, dict] = {}
    for group in touched:
        pins.update(plan_cut_waiting(settings, {a: after[a] for a in group}, registry, events, wait_s))
    return pins


def held_back_now(settings: Settings, registry: Registry | None = None) -> dict[str, str]:
    """asset -> why the newest consistent cut (:func:`plan_cut` over every promoted lineage, as
    ``kappa advance`` would choose it now) pins it before its table's latest micro-batch, one line
    each (:func:`held_back`); a lineage that cannot be cut names the :class:`CutError` for each of
    its assets. For ``kappa status`` (``registry``: its snapshot; default: a new one)."""
    registry = registry or Registry(settings)
    events = registry.events()
    current = {a: v.version for a, v in registry.promoted_all().items()}
    out: dict[str, str] = {}
    for group in lineages(settings, current, registry, events):
        try:
            pins = plan_cut(settings, {a: current[a] for a in group}, registry, events)
        except CutError as exc:
            out.update({a: f"{a}: the lineage cannot be cut now: {exc}" for a in group})
            continue
        out.update({a: p["held_back"] for a, p in pins.items() if p.get("held_back")})
    return out


@dataclass
class AdvanceReport:
    """What ``kappa advance`` did: the new pins (asset -> pin), the snapshots before (asset ->
    Delta version, None: never pinned) and the lineages it could not cut (their :class:`CutError`)."""

    pins: dict[str, dict]
    before: dict[str, int | None]
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def unverified(self) -> dict[str, str]:
        """asset -> why its new pin is not verified (:func:`unverified`)."""
        return unverified(self.pins)

    @property
    def held_back(self) -> dict[str, str]:
        """asset -> why its new pin is before its table's latest micro-batch, and which reader holds
        it there (one line, :func:`held_back`)."""
        return {a: p["held_back"] for a, p in self.pins.items() if p.get("held_back")}

    def to_json(self) -> dict:
        """``pins``, ``moved`` (asset -> [before, after]), ``refused``, ``unverified``, ``held_back``
        as JSON values."""
        return {"pins": self.pins, "moved": {a: list(m) for a, m in self.moved.items()}, "refused": self.refused,
                "unverified": self.unverified, "held_back": self.held_back}

    @property
    def moved(self) -> dict[str, tuple[int | None, int]]:
        """asset -> (snapshot before, after) for every name whose snapshot changed."""
        return {a: (self.before.get(a), p["snapshot"]) for a, p in self.pins.items()
                if self.before.get(a) != p["snapshot"]}


def advance(settings: Settings, assets: list[str] | None = None, reason: str = "advance",
            wait_s: float = 30.0, registry: Registry | None = None) -> AdvanceReport:
    """Move the cut forward: re-pin every promoted name (or those of ``assets``' lineages) at the
    latest consistent cut (waiting up to ``wait_s`` seconds per lineage for running readers to
    agree, :func:`plan_cut_waiting`), in ONE registry commit, then wait for a running SQL endpoint
    to swap its views. A lineage that cannot be cut keeps its pins and is reported in ``refused``.
    Raises :class:`kappa.services.serve.ServeError` when a running endpoint does not apply it;
    :class:`kappa.spec.SpecError` when a name of ``assets`` is neither declared nor in the registry
    (before, an unknown name moved nothing and said the cut was already at the newest snapshot).
    ``registry``: the command's snapshot (default: a new one), which sees the new pins."""
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.services.serve import await_in_step

    registry = registry or Registry(settings)
    events = registry.events()
    for asset in sorted(set(assets or ()) - {e["asset"] for e in events}):
        catalog_of(settings)[asset]  # neither declared nor ever run: SpecError "unknown asset"
    promoted = registry.promoted_all()
    current = {a: v.version for a, v in promoted.items()}
    groups = lineages(settings, current, registry, events)
    if assets:
        groups = [g for g in groups if set(g) & set(assets)]
    report = AdvanceReport(pins={}, before={a: v.snapshot for a, v in promoted.items()})
    for group in groups:
        try:
            report.pins.update(plan_cut_waiting(settings, {a: current[a] for a in group}, registry, events, wait_s))
        except CutError as exc:
            report.refused[", ".join(group)] = str(exc)
    changed = {a: p for a, p in report.pins.items() if promoted[a].pin is None or promoted[a].snapshot != p["snapshot"]}
    if changed:
        registry.pin(changed, reason)
        await_in_step(settings)
    return report


def advance_past(settings: Settings, at_least: dict[str, int], reason: str, wait_s: float = 60.0,
                 poll_s: float = 2.0, registry: Registry | None = None) -> AdvanceReport:
    """Advance the cut until every promoted version whose table path is a key of ``at_least`` is
    pinned at or after that Delta version (``kappa forget``: past its DELETE commits, so readers no
    longer see the key and a ``VACUUM RETAIN 0 HOURS`` removes no file a pin names), trying for up
    to ``wait_s`` seconds while running queries move on. Raises :class:`CutError` naming the tables
    still pinned before it (stop their queries, or wait, and run again). ``registry``: the
    command's snapshot (default: a new one), refreshed once per try: the readers' pins move."""
    deadline = time.monotonic() + wait_s
    registry = registry or Registry(settings)
    while True:  # a wait loop: one read of the registry per iteration
        report = advance(settings, reason=reason, wait_s=0.0, registry=registry.refresh())
        behind = {v.name: (v.snapshot, at_least[v.table_path]) for v in registry.promoted_all().values()
                  if v.table_path in at_least and v.snapshot is not None and v.snapshot < at_least[v.table_path]}
        if not behind:
            return report
        if time.monotonic() + poll_s > deadline:
            raise CutError("the cut cannot move past the forget's DELETE commits of " + ", ".join(
                f"{name} (pinned at Delta version {pin}, needs {need})" for name, (pin, need) in sorted(behind.items()))
                + "; its readers have not read past them: let them run (or stop them) and run `kappa forget` again, "
                  "which resumes" + (f" ({'; '.join(report.refused.values())})" if report.refused else ""))
        time.sleep(poll_s)
