"""Replay, promotion and rollback: Kappa's reprocessing is a replay of the log into a new version.

``replay(asset)``:

1. refuses if retention has deleted any of the log the asset's topics must be read from and the
   topic's archive (its bronze table) does not hold it (:func:`kappa.runners.versions.log_sources`:
   below the log start a new version reads the archive, from it Kafka);
2. creates version N+1 of the asset and of every asset downstream of it, each with a fresh
   checkpoint and idempotent-writer id, the downstream versions reading the new upstream versions;
3. runs the chain until caught up, runs the gate on every new version, and, when asked to promote
   and every blocking check of every version passed, promotes the whole chain in ONE registry commit
   (a reader never sees gold vN+1 over silver vN). Otherwise the current versions stay promoted.

This is the Kappa architecture's reprocessing (Jay Kreps, "Questioning the Lambda Architecture";
DDIA ch. 11, "Reprocessing data for application evolution").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from kappa.config import Settings
from kappa.delta.registry import Registry, RegistryError, Version
from kappa.errors import KappaError
from kappa.quality.gate import GateReport
from kappa.runners.base import AssetRunResult
from kappa.runners.versions import RetentionError, log_sources
from kappa.delta.declarations import catalog as catalog_of, known_version, provenance
from kappa.spec import Catalog, upstream_first
from kappa.streaming.kinds import kind_of

if TYPE_CHECKING:
    from kappa.runners.base import Runner


class GateFailedError(KappaError, RuntimeError):
    """A version's blocking checks failed, so it cannot be promoted."""


@dataclass
class ReplayReport:
    """What one replay did: the new version per asset, each run's result and gate, whether the chain
    was promoted, how long it took (seconds), the versions promoted before and the queries stopped."""
    versions: dict[str, int]
    results: list[AssetRunResult]
    gates: dict[str, GateReport]
    promoted: bool
    seconds: float
    previous: dict[str, int | None] = field(default_factory=dict)
    #: Older versions whose queries were stopped after the promotion (``asset/vN``).
    stopped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every new version's gate passed."""
        return all(g.passed for g in self.gates.values())


def check_history_complete(settings: Settings, catalog, chain: list[str]) -> None:
    """A history (a ``changelog`` asset with ``mode: history``) needs every change ever made; a
    compacted topic keeps only the latest per key. Raises :class:`RetentionError` naming the asset
    and the topic when compaction has removed records from a topic a history in ``chain`` reads. A
    current-state table needs only the latest change per key, so it replays from a compacted topic."""
    from kappa.kafka.topics import records_present

    for name in chain:
        if not kind_of(catalog[name]).full_log(catalog[name]):
            continue
        for topic in catalog[name].topics:
            for partition, (start, end, present) in records_present(settings, topic).items():
                if present < end - start:
                    raise RetentionError(
                        f"cannot replay {name}: it is a history (every version of every row), but compaction has "
                        f"removed {end - start - present:,} of the {end - start:,} records of {topic}[{partition}] "
                        f"(offsets {start}-{end - 1}); a replay would miss versions. Current-state tables can "
                        f"still be rebuilt from the compacted topic; the history cannot.")


def create_chain_versions(settings: Settings, catalog, chain: list[str], registry: Registry) -> dict[str, Version]:
    """Version N+1 of every asset in ``chain`` (topological order): fresh checkpoint and writer id,
    where it reads its topics' log (:func:`kappa.runners.versions.log_sources`: the log start
    offsets, and below them the topic's archive when retention deleted records), and each upstream
    pinned to its new version in the chain, else to its promoted (or latest) version. Every asset's
    log is checked before any version is created. Raises :class:`RetentionError` (nothing created)
    when part of a log is in neither the broker nor an archive; :class:`RegistryError` for an
    upstream with no version."""
    sources = {name: log_sources(settings, catalog, catalog[name], registry) for name in chain}
    new: dict[str, Version] = {}
    for name in chain:
        spec = catalog[name]
        upstream = {}
        for up in spec.upstream:
            source = new.get(up) or registry.promoted(up) or registry.latest(up)
            if source is None:
                raise RegistryError(f"{name} reads {up}, which has no version: run {up} first")
            upstream[up] = source.version
        new[name] = registry.create_version(name, spec.fingerprint(), upstream, reason="replay",
                                            **sources[name], **provenance(settings, spec))
    return new


def begin_replay(settings: Settings, asset: str, registry: Registry,
                 catalog: Catalog | None = None) -> tuple[list[str], dict[str, Version]]:
    """The replay chain of ``asset`` (it and everything downstream that has run, i.e. has a
    version, topological order), checked for a complete log, with version N+1 of each created in
    ``registry``. A downstream asset that never ran has nothing to reprocess: its first run reads
    the versions promoted then. ``catalog``: the command's (default: loaded here). Returns (chain,
    new versions). Raises :class:`RetentionError` before creating anything if the log is incomplete."""
    catalog = catalog or catalog_of(settings)
    ran = [d for d in catalog.downstream(asset) if registry.latest(d) is not None]
    chain = catalog.topological([asset, *ran])
    check_history_complete(settings, catalog, chain)
    return chain, create_chain_versions(settings, catalog, chain, registry)


def replay(
    settings: Settings,
    asset: str,
    *,
    promote: bool = False,
    runner: "Runner | None" = None,
    spark=None,
    on_progress: Callable[[str, dict], None] | None = None,
    timeout_s: float | None = None,
    on_step: Callable[[str], None] | None = None,
    registry: Registry | None = None,
) -> ReplayReport:
    """THE replay -> gate -> promote, whatever the runner (the CLI, Dagster's ``replay`` job and
    ``kappa demo`` all call this):

    1. :func:`begin_replay`: the chain (``asset`` and everything downstream), retention checked,
       version N+1 of each created in the registry (its paths and writer id made there, once);
    2. :func:`kappa.runners.base.catch_up` on ``runner`` (default: :func:`~kappa.runners.pick_runner`
       with ``spark``): every new version runs until it has read the log end offsets taken when
       the replay started (a long-running query's catch-up is read from its checkpoint);
    3. ``runner.gate`` on every new version (locally in this Spark; on Kubernetes a batch
       SparkApplication), each result recorded in the registry;
    4. with ``promote`` and every blocking check passed: ONE registry commit promotes the chain;
       then the runner stops every older version's query (on Kubernetes: deletes its application).

    Every step reads and records through ``registry``, the command's one snapshot of the registry
    (default: a new one, read once; ``kappa replay``'s).

    Raises :class:`RetentionError` before creating anything if the log is incomplete;
    :class:`kappa.runners.base.RunError` if a query fails or does not catch up within ``timeout_s``."""
    from kappa.runners import pick_runner
    from kappa.runners.base import catch_up

    say = on_step or (lambda _m: None)
    started = time.monotonic()
    registry = registry or Registry(settings)
    catalog = catalog_of(settings)  # the command's one catalog
    chain, new = begin_replay(settings, asset, registry, catalog)
    runner = runner or pick_runner(settings, spark=spark)
    say(f"replaying {', '.join(v.name for v in new.values())} on the {runner.kind} runner")
    for v in new.values():
        for topic, entry in ((v.last("created") or {}).get("archive") or {}).items():
            parts = ", ".join(f"[{p}] 0-{int(o) - 1}" for p, o in entry["below"].items())
            say(f"{v.name} reads {topic} {parts} from its archive {entry['asset']}/v{entry['version']}, "
                f"the rest from Kafka")
    results = catch_up(runner, settings, catalog, chain, new, registry=registry, on_progress=on_progress,
                       timeout_s=timeout_s)
    previous = {name: (p.version if (p := registry.promoted(name)) else None) for name in chain}
    gates, promoted, stopped = gate_and_promote(settings, runner, {n: v.version for n, v in new.items()},
                                                promote=promote, reason="replay", registry=registry, on_step=say,
                                                catalog=catalog)
    return ReplayReport(versions={n: v.version for n, v in new.items()}, results=results, gates=gates,
                        promoted=bool(promoted), seconds=round(time.monotonic() - started, 1), previous=previous,
                        stopped=stopped)


def gate_and_promote(
    settings: Settings, runner: "Runner", versions: dict[str, int], *, promote: bool, reason: str,
    registry: Registry, atomic: bool = True, on_step: Callable[[str], None] | None = None,
    catalog: Catalog | None = None,
) -> tuple[dict[str, GateReport], dict[str, int], list[str]]:
    """Gate every version of ``versions`` (asset -> version, topological order) on ``runner``
    (recorded through ``registry``) and,
    with ``promote``, promote: ``atomic`` — the whole set in ONE registry commit if every blocking
    check of every version passed, else nothing (a chain); not ``atomic`` — each version that passed
    (``kappa demo``'s first versions). After the commit the runner stops every older version's query.
    ``catalog``: the command's, for the gates (default: each gate loads it).
    Returns (gate reports, promoted asset -> version, stopped ``asset/vN``)."""
    say = on_step or (lambda _m: None)
    gates: dict[str, GateReport] = {}
    for name, version in versions.items():
        say(f"gate of {name}/v{version} on the {runner.kind} runner")
        gates[name] = runner.gate(name, version, registry, catalog)
    passed = {n: v for n, v in versions.items() if gates[n].passed}
    targets = (dict(versions) if len(passed) == len(versions) else {}) if atomic else passed
    if not promote or not targets:
        return gates, {}, []
    commit_promotion(settings, targets, reason=reason, registry=registry, chain=list(targets),
                     gates={n: gates[n].passed for n in targets})
    # Only after the promotion commit: readers have moved to the new versions, so the old queries
    # can stop. Their tables and checkpoints stay (a rollback can read them).
    stopped = []
    for name, version in targets.items():
        for old in range(1, version):  # versions are numbered 1..N without gaps
            if runner.stop(name, old):
                stopped.append(f"{name}/v{old}")
    return gates, targets, stopped


def commit_promotion(settings: Settings, targets: dict[str, int], reason: str, registry: Registry | None = None,
                     **evidence: object) -> None:
    """Point each stable name in ``targets`` at its version in one registry commit through ``registry``
    (the command's snapshot; default: a new one)
    (:meth:`kappa.delta.registry.Registry.promote`), pinned at one consistent cut with every
    promoted name of the lineages they join (:func:`kappa.lifecycle.cut.cut_for`: each name reads a
    Delta snapshot covering exactly what the snapshots it was computed from hold), then wait until
    a running SQL endpoint (``kappa serve``) has swapped its views, so the next query through it
    reads what was just promoted.

    Raises :class:`RegistryError` for an unknown or retired version;
    :class:`kappa.lifecycle.cut.CutError` (nothing promoted) when no consistent cut exists;
    :class:`kappa.services.serve.ServeError` if a running endpoint does not apply it within 30 s."""
    from kappa.lifecycle.cut import cut_for
    from kappa.services.serve import await_in_step

    registry = registry or Registry(settings)
    registry.promote(targets, reason=reason, pins=cut_for(settings, targets, registry), **evidence)
    await_in_step(settings)


def last_promotion(registry: Registry, asset: str) -> list[dict]:
    """The registry events of the commit that last pointed ``asset``'s stable name somewhere (a
    promotion or a rollback): its ``promoted`` events and the ``pinned`` events committed with it.
    One commit writes every row with one ``at`` (:meth:`kappa.delta.registry.Registry.promote`).
    Raises :class:`RegistryError` when ``asset`` was never promoted."""
    events = registry.events()
    mine = [e for e in events if e["asset"] == asset and e["event"] == "promoted"]
    if not mine:
        raise RegistryError(f"{asset} has never been promoted")
    return [e for e in events if e["at"] == mine[-1]["at"] and e["event"] in ("promoted", "pinned")]


def commit_pins(registry: Registry, asset: str) -> dict[str, dict]:
    """asset -> pin (the event's details: ``snapshot``, ``verified``, ``why_unverified``, …) of every
    stable name the commit that last promoted ``asset`` pinned (:func:`last_promotion`)."""
    return {e["asset"]: e["details"] for e in last_promotion(registry, asset)}


def latest_gate(version: Version) -> tuple[bool, list[dict]] | None:
    """(passed, checks) of the version's most recent gate run, or None if never gated."""
    for e in reversed(version.events):
        if e["event"] in ("gate_passed", "gate_failed"):
            return e["event"] == "gate_passed", e["details"].get("checks", [])
    return None


class InconsistentPromotionError(KappaError, RuntimeError):
    """Promoting one version alone would leave stable names pinned over different versions of the
    same upstream (a downstream table computed from another version than the one its name reads)."""


def pin_conflicts(registry: Registry, targets: dict[str, int]) -> list[str]:
    """What pointing the stable names of ``targets`` (asset -> version) at those versions would make
    inconsistent: every promoted (or targeted) version whose pinned upstream version differs from
    the version that upstream's stable name would point at, where one side of the pair is a target.
    Empty when the promotion keeps every chain at one cut."""
    after = {a: v.version for a, v in registry.promoted_all().items()} | dict(targets)
    conflicts = []
    for name, number in sorted(after.items()):
        for upstream, pinned in sorted(registry.version(name, number).upstream.items()):
            if upstream in after and after[upstream] != pinned and (name in targets or upstream in targets):
                conflicts.append(f"{name} v{number} was computed from {upstream} v{pinned}, but {upstream} would "
                                 f"point at v{after[upstream]}")
    return conflicts


def promote(settings: Settings, asset: str, version: int, spark=None, runner: "Runner | None" = None,
            only: bool = False, registry: Registry | None = None) -> GateReport | None:
    """Promote one version after its gate passes (running the gate if it never ran).

    Unless ``only``, refuses when the promotion would leave a downstream stable name pinned over a
    different version of this asset, or this version pinned over a different version of an upstream
    than the one promoted (:func:`pin_conflicts`): promote the chain with ``kappa replay --promote``.

    Raises :class:`GateFailedError` naming the failed checks; :class:`InconsistentPromotionError`
    naming the conflicting pins; :class:`RegistryError` for an unknown or retired version.
    ``registry``: the command's snapshot (default: a new one, ``kappa promote``'s)."""
    registry = registry or Registry(settings)
    ver = known_version(settings, registry, asset, version)
    conflicts = [] if only else pin_conflicts(registry, {asset: version})
    if conflicts:
        raise InconsistentPromotionError(
            f"promoting {asset} v{version} alone would leave names over different versions: "
            + "; ".join(conflicts) + ". Promote the chain together (`kappa replay " + asset
            + " --promote`), or promote this version alone with --only")
    report = None
    gate = latest_gate(ver)
    if gate is None:
        from kappa.runners import pick_runner

        report = (runner or pick_runner(settings, spark=spark)).gate(asset, version, registry)
        gate = (report.passed, [c.__dict__ for c in report.checks])
    passed, checks = gate
    if not passed:
        failed = [c for c in checks if c["blocking"] and not c["passed"]]
        raise GateFailedError(
            f"{asset} v{version} failed its gate; not promoted. Failed checks: "
            + "; ".join(f"{c['name']} (observed {c['observed']}; expected {c['expected']})" for c in failed)
        )
    commit_promotion(settings, {asset: version}, reason="manual", registry=registry)
    return report


def rollback(settings: Settings, asset: str, runner: "Runner | None" = None,
             on_step: Callable[[str], None] | None = None, registry: Registry | None = None) -> dict[str, int]:
    """Roll back the chain that was promoted with ``asset``'s current version (every stable name of
    that promotion commit, e.g. a replay's asset and its downstream assets) to each name's previously
    promoted version, in one registry commit; returns asset -> the version it points at now.

    After the commit, on a runner whose queries outlive the caller (``runner.detached``; default
    :func:`~kappa.runners.pick_runner`: on Kubernetes), each rolled-back-to version's query runs
    again from its checkpoint: ``runner.start`` with the version's recorded declaration, upstream
    first, creates the SparkApplication the promotion that replaced it deleted (or observes it
    when it still exists), and the version is recorded ``running``; ``on_step`` hears about each.
    Local queries live in the process that started them (``kappa run``) and end with it: nothing
    is started here, and the version continues from its checkpoint when ``kappa run`` starts it.

    Raises :class:`~kappa.spec.base.SpecError` when ``asset`` is neither declared nor in the
    registry (an unknown name); :class:`RegistryError` when ``asset`` (or a member of its chain) has no previously
    promoted version, or when a member of the chain has been promoted again since (rolling it back
    would undo that later promotion: roll that one back first); :class:`kappa.runners.base.RunError`
    when a query cannot start again (the rollback commit stands: the stable names read the
    rolled-back-to tables either way, they only stop growing). ``registry``: the command's snapshot
    (default: a new one, ``kappa rollback``'s)."""
    registry = registry or Registry(settings)
    events = registry.events(asset)
    promotions = [e for e in events if e["event"] == "promoted"]
    if not promotions:
        if not events:
            catalog_of(settings)[asset]  # a name neither declared nor ever run: SpecError "unknown asset"
        raise RegistryError(f"{asset} has never been promoted: nothing to roll back")
    last = promotions[-1]
    chain = list(dict.fromkeys([asset, *(last["details"].get("chain") or [])]))
    targets: dict[str, int] = {}
    for name in chain:
        mine = [e for e in registry.events(name) if e["event"] == "promoted"]
        if not mine or mine[-1]["at"] != last["at"]:
            raise RegistryError(f"{name} was promoted with {asset} but has been promoted again since; "
                                f"roll {name} back first")
        target = registry.previous_promoted(name)
        if target is None:
            raise RegistryError(f"{name} has no previously promoted version to roll back to")
        targets[name] = target
    commit_promotion(settings, targets, reason="rollback", registry=registry, chain=list(targets))
    _resume(settings, runner, targets, on_step or (lambda _m: None), registry)
    return targets


def _resume(settings: Settings, runner: "Runner | None", targets: dict[str, int], say: Callable[[str], None],
            registry: Registry) -> None:
    """Run each of ``targets`` (asset -> version) again on ``runner`` (see :func:`rollback`)."""
    from kappa.delta.declarations import recorded_spec
    from kappa.runners import pick_runner
    from kappa.runners.base import Outcome, RunError

    runner = runner or pick_runner(settings)
    if not runner.detached:
        return
    versions = {n: registry.version(n, v) for n, v in targets.items()}
    catalog = catalog_of(settings) if any(v.declaration is None for v in versions.values()) else None
    # upstream first: a downstream driver reads its upstream version's table
    for name in upstream_first({n: v.upstream for n, v in versions.items()}):
        version = versions[name]
        spec = recorded_spec(settings, version, None if catalog is None else catalog.assets.get(name))
        status = runner.start(spec, version)
        where = f"{status.namespace}/{status.name}"
        if status.outcome is Outcome.RUNNING:
            registry.record(name, version.version, "running", mode=runner.kind, application=status.name,
                            reason="rollback")
            say(f"{version.name} runs again ({where}, from its checkpoint)")
        elif status.outcome in (Outcome.PENDING, Outcome.SUSPENDED):
            say(f"{version.name}: {where} created again, not running yet ({status.state or 'NEW'})")
        else:
            raise RunError(f"{version.name} is promoted again but its query does not run ({where}: "
                           f"{status.state or 'no application'}): {status.error or 'no error message'}")
