"""Adding, editing and retiring assets at run time: ``kappa declarations`` and Dagster's
``add_asset``/``edit_asset``/``retire_asset`` jobs, one implementation for both front ends.

A run-time declaration is YAML text, not a file in the image. It is

1. **validated** like a file (the same models; errors name ``declarations:<name>`` and the field)
   *together with* the catalog it would join (:func:`kappa.delta.declarations.catalog`: a name
   already declared, an unknown upstream, an undeclared topic or a cycle is refused);
2. held to the run-time **policy** (:func:`kappa.streaming.policy.check_runtime_declaration`:
   ``sql`` is one ``SELECT … FROM input`` parsed by Spark, ``python`` needs code review, resources
   stay within the caps); a refusal names its rule;
3. **recorded** in the declarations log (``proposed`` when only checked, ``added``/``edited``/
   ``retired`` when applied). Versions created afterwards record the text they run
   (:func:`kappa.delta.declarations.provenance`).

An edit names the fingerprint it was made from (``expected_fingerprint``): a stale edit, made over
text someone changed since, is refused (optimistic concurrency). An edit that changes the logic
(:meth:`kappa.spec.AssetSpec.fingerprint`) does not touch the running version, which keeps the text
it recorded: a replay builds the new logic into a new version. Retiring is refused while another
asset or a dbt model reads the asset; it stops the asset's running versions and retires them in the
registry (the stable name stops resolving), and keeps their tables.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kappa.config import Settings
from kappa.delta.declarations import Declaration, DeclarationError, Declarations, catalog, text_fingerprint
from kappa.delta.registry import Registry
from kappa.spec import AssetSpec, Catalog, declaration_label, parse_declaration

if TYPE_CHECKING:
    from kappa.runners.base import Runner


def default_who() -> str:
    """Who a change is recorded as when nobody says: the operating-system user."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in a container without an /etc/passwd entry
        return "unknown"


@dataclass
class DeclarationChange:
    """What :func:`add`, :func:`edit` or :func:`retire` did: the recorded event (None when only
    checked and nothing was recorded), the validated spec (None for a retirement), whether the
    logic changed (an edit), and the lines a front end shows."""

    asset: str
    event: str
    recorded: Declaration | None
    spec: AssetSpec | None
    fingerprint: str
    logic_changed: bool = False
    notes: list[str] = field(default_factory=list)
    #: The run on a sample (:func:`analyze`) when asked for, else None.
    analysis: "Analysis | None" = None

    def to_dict(self) -> dict:
        """JSON-ready summary."""
        return {"asset": self.asset, "event": self.event, "fingerprint": self.fingerprint,
                "logic_changed": self.logic_changed, "notes": self.notes,
                "recorded": self.recorded.to_dict() if self.recorded else None}


def validate(settings: Settings, text: str, *, replacing: bool = False) -> tuple[AssetSpec, Catalog]:
    """Parse ``text`` and validate it with the catalog it would join (replacing the active
    declaration of the same name when ``replacing``). Returns the spec and the candidate catalog.
    Raises :class:`SpecError` naming ``declarations:<name>`` and the field, or
    :class:`DeclarationError` for an add of a name already declared (or an edit of one that is not),
    an expectation Great Expectations does not have or whose arguments it refuses (SpecError),
    or, on the ``kubernetes`` runner, a declaration reading a topic: no KafkaUser of the chart
    covers it (the chart makes one per asset of ``assets/``)."""
    spec = parse_declaration(text)
    active = _check_name(settings, spec.name, replacing)
    candidate = catalog(settings, declared={**active, spec.name: spec})  # spec: not parsed again
    from kappa.runners import runner_class

    refused = runner_class(settings).refuses_source_topics(spec)
    if refused:
        raise DeclarationError(f"{declaration_label(spec.name)}: source.kafka.topics: {refused}")
    from kappa.quality.gate import expectations

    expectations(candidate[spec.name])  # each a Great Expectations expectation with its arguments
    return candidate[spec.name], candidate


def _check_name(settings: Settings, name: str, replacing: bool) -> dict[str, str]:
    """The active declarations (name -> YAML text), after checking that ``name`` is one of them
    when ``replacing`` (an edit) and is not when adding. Raises :class:`DeclarationError`."""
    active = {n: d.yaml for n, d in Declarations(settings).active().items()}
    label = declaration_label(name)
    if replacing and name not in active:
        files = catalog(settings, declared={})
        where = files.assets[name].where if name in files.assets else None
        raise DeclarationError(f"{label}: name: {name!r} is not an active declaration"
                               + (f" (it is declared in {where}: edit the file)" if where else
                                  " (add it with `kappa declarations add`)"))
    if not replacing and name in active:
        raise DeclarationError(f"{label}: name: {name!r} is already declared in {label}; "
                               "change it with `kappa declarations edit` (or Dagster's edit_asset)")
    return active


def check_policy(settings: Settings, spec: AssetSpec, spark=None) -> None:
    """Hold ``spec`` to the run-time policy (:mod:`kappa.streaming.policy`), parsing its SQL with
    Spark (``spark``: a session or a function returning one; default this process's session),
    asked for only when a rule that needs no Spark has not refused it already. Raises its
    ``PolicyError`` naming the rule."""
    from kappa.streaming.policy import check_runtime_declaration
    from kappa.streaming.session import spark_session

    check_runtime_declaration(spark or (lambda: spark_session(settings)), spec)


#: Rows of each upstream table an analysis reads (its bounded sample).
SAMPLE_ROWS = 1000


@dataclass
class Analysis:
    """What :func:`analyze` found on a bounded sample: the output ``schema`` (column -> Spark
    type), ``rows`` (the first rows, as records), ``row_count`` (rows the sample produced),
    ``sample`` (upstream asset -> ``{"version", "rows"}`` read), the gate's ``checks`` on the sample
    (:class:`kappa.quality.gate.CheckResult` as dicts: expectations, quarantine rate, …; a check
    with nothing to measure says so), ``passed`` and ``seconds``."""

    asset: str
    schema: dict[str, str]
    rows: list[dict]
    row_count: int
    sample: dict[str, dict]
    checks: list[dict]
    passed: bool
    seconds: float


def analyze(settings: Settings, spec: AssetSpec, spark, sample_rows: int = SAMPLE_ROWS,
            shown_rows: int = 10) -> Analysis:
    """Run ``spec``'s real streaming query, available-now, over a bounded sample in a scratch
    location (``<warehouse>/_kappa/scratch/<id>``, deleted afterwards): each upstream's promoted
    (else latest) version is sampled (its pinned snapshot, first ``sample_rows`` rows) into a
    scratch version of that upstream, the declaration runs on it exactly as a version would
    (:func:`kappa.runners.run_until_caught_up`), and the gate runs on the output
    (:func:`kappa.quality.gate.run_gate`: expectations, quarantine rate, late rows).

    The scratch catalog is the real one (:func:`kappa.delta.declarations.catalog`: the files and
    every active declaration, so an upstream may itself be declared at run time) with ``spec``'s
    text in it.

    Raises :class:`DeclarationError` for a declaration that reads Kafka directly (its sample is
    its first run) or an upstream with no version, and Spark's error (as
    :class:`kappa.runners.base.RunError`) when the query does not resolve or fails."""
    import time
    import uuid

    from kappa.config import join
    from kappa.core.storage import delete_tree
    from kappa.quality.gate import run_gate
    from kappa.runners import run_until_caught_up

    if spec.topics:
        raise DeclarationError(f"{spec.where}: source.kafka: an asset reading a topic directly is not analyzed on "
                               "a sample here; add it and run it (its first run is its sample)")
    started = time.monotonic()
    registry = Registry(settings)
    root = join(settings.warehouse, "_kappa", "scratch", uuid.uuid4().hex[:12])
    scratch = settings.model_copy(update={"warehouse": join(root, "warehouse"),
                                          "checkpoints": join(root, "checkpoints")})
    scratch_registry = Registry(scratch)
    sample: dict[str, dict] = {}
    try:
        for up in spec.upstream:
            source = registry.promoted(up) or registry.latest(up)
            if source is None:
                raise DeclarationError(f"{spec.where}: source.asset: {up} has no version to sample; run it first")
            reader = spark.read.format("delta")
            if source.snapshot is not None:
                reader = reader.option("versionAsOf", source.snapshot)
            rows = reader.load(str(source.table_path)).limit(sample_rows)
            copy = scratch_registry.create_version(up, source.fingerprint, {}, sampled_from=source.name)
            rows.write.format("delta").save(str(copy.table_path))
            sample[up] = {"version": source.name, "rows": spark.read.format("delta").load(str(copy.table_path)).count()}
        # The scratch catalog is the real one with this text in it: the files of assets/ plus every
        # active declaration (an upstream may itself be declared at run time), this one replacing
        # its own active text when it is an edit.
        active = {n: d.yaml for n, d in Declarations(settings).active().items() if n != spec.name}
        Declarations(scratch).record_all({**active, spec.name: spec.text or ""}, "added", who="analyze")
        # One registry and one catalog for the command: the version the run creates is in the
        # registry's snapshot, and ``spec`` is not parsed again.
        candidate = catalog(scratch, declared={**active, spec.name: spec})
        run_until_caught_up(scratch, [spec.name], spark=spark, registry=scratch_registry, catalog=candidate)
        out = scratch_registry.latest(spec.name)
        assert out is not None
        table = spark.read.format("delta").load(str(out.table_path))
        report = run_gate(scratch, spec.name, out.version, spark=spark, registry=scratch_registry, catalog=candidate)
        analysis = Analysis(
            asset=spec.name, schema={f.name: f.dataType.simpleString() for f in table.schema.fields},
            rows=[r.asDict() for r in table.limit(shown_rows).collect()], row_count=table.count(), sample=sample,
            checks=[{k: v for k, v in c.__dict__.items() if k != "details"} for c in report.checks],
            passed=report.passed, seconds=time.monotonic() - started)
    finally:
        delete_tree(root, settings)  # nothing, when nothing was written
    return analysis


def add(settings: Settings, text: str, *, apply: bool = False, who: str | None = None, reason: str = "",
        run_id: str | None = None, spark=None, sample: bool = False,
        checked: AssetSpec | None = None) -> DeclarationChange:
    """Validate ``text`` as a new asset (:func:`validate`, :func:`check_policy`), with ``sample``
    run it on a sample (:func:`analyze`, an asset reading an upstream asset); record it as
    ``added`` when ``apply``, else as ``proposed``. ``checked``: the spec :func:`validate` and
    :func:`check_policy` already made of ``text`` earlier in the same run (a Dagster job's first
    step): it is not parsed or held to the policy again, only its name checked again (another run
    may have taken it since). Raises :class:`SpecError`, :class:`DeclarationError`, the policy's
    error or the sample run's; nothing is recorded then."""
    spec, _ = _validated(settings, text, checked, spark=spark)
    analysis = _sample(settings, spec, spark) if sample else None
    event = "added" if apply else "proposed"
    rec = Declarations(settings).record(spec.name, event, text, who=who or default_who(), reason=reason,
                                        run_id=run_id)
    notes = ([f"{spec.name} added as {declaration_label(spec.name)} (fingerprint {rec.fingerprint}); "
              f"run it with `kappa run {spec.name}` or materialize it in Dagster"] if apply else
             [f"{spec.name} is valid and within policy (fingerprint {rec.fingerprint}); recorded as proposed, "
              "not applied: add --apply (Dagster: apply: true) to add it"])
    return DeclarationChange(spec.name, event, rec, spec, rec.fingerprint, notes=notes, analysis=analysis)


def _validated(settings: Settings, text: str, checked: AssetSpec | None, *, spark,
               expected_fingerprint: str | None = None) -> tuple[AssetSpec, Declaration | None]:
    """``text``'s spec, validated (:func:`validate`; an edit when ``expected_fingerprint`` is given,
    then checked fresh, :func:`check_fresh`, before Spark starts) and held to the policy
    (:func:`check_policy`), with the declaration an edit replaces. When ``checked`` (validated and
    held to the policy earlier in the run), that spec with only its name and freshness checked
    again (another run may have changed the declarations since)."""
    editing = expected_fingerprint is not None
    if checked is None:
        spec, _ = validate(settings, text, replacing=editing)
    elif checked.text != text:
        raise DeclarationError(f"{declaration_label(checked.name)}: the text changed after it was validated")
    else:
        spec = checked
        _check_name(settings, spec.name, editing)
    current = check_fresh(settings, spec, expected_fingerprint) if editing else None
    if checked is None:
        check_policy(settings, spec, spark)
    return spec, current


def _sample(settings: Settings, spec: AssetSpec, spark) -> "Analysis | None":
    from kappa.streaming.session import spark_session

    return None if spec.topics else analyze(settings, spec, spark or spark_session(settings))


def check_fresh(settings: Settings, spec: AssetSpec, expected_fingerprint: str) -> Declaration:
    """The active declaration an edit to ``spec`` (:func:`validate`'s, with its text) replaces.
    Raises :class:`DeclarationError` when ``expected_fingerprint`` is not its fingerprint (a stale
    edit: someone changed the text since it was read; optimistic concurrency), when there is none,
    or when the text is unchanged."""
    name, text = spec.name, spec.text
    label = declaration_label(name)
    current = Declarations(settings).active().get(name)
    if current is None:
        raise DeclarationError(f"{label}: name: {name!r} is not an active declaration")
    if expected_fingerprint != current.fingerprint:
        raise DeclarationError(
            f"{label}: stale edit: the declaration is at fingerprint {current.fingerprint} ({current.event} by "
            f"{current.who} at {current.at:%Y-%m-%d %H:%M:%S} UTC), not {expected_fingerprint}; start again from "
            f"the current text (`kappa declarations list --format json`)")
    if text_fingerprint(text) == current.fingerprint:
        raise DeclarationError(f"{label}: the text is unchanged (fingerprint {current.fingerprint}); nothing to edit")
    return current


def edit(settings: Settings, text: str, expected_fingerprint: str, *, apply: bool = True, who: str | None = None,
         reason: str = "", run_id: str | None = None, spark=None, sample: bool = False,
         checked: AssetSpec | None = None) -> DeclarationChange:
    """Replace an active declaration's text. Refused (:class:`DeclarationError`) when
    ``expected_fingerprint`` is not the active text's fingerprint (a stale edit) or the text is
    unchanged; validated, held to policy and sampled as :func:`add`. Recorded as ``edited`` when
    ``apply``, else as ``proposed`` (replacing nothing yet: the active text stays). The change says
    whether the logic changed (a replay is then needed). ``checked`` as for :func:`add`."""
    spec, current = _validated(settings, text, checked, spark=spark, expected_fingerprint=expected_fingerprint)
    name, fingerprint = spec.name, text_fingerprint(text)
    analysis = _sample(settings, spec, spark) if sample else None
    logic_changed = parse_declaration(current.yaml).fingerprint() != spec.fingerprint()
    event = "edited" if apply else "proposed"
    rec = Declarations(settings).record(name, event, text, who=who or default_who(), reason=reason,
                                        run_id=run_id, replaces=current.fingerprint)
    notes = [f"{name}: {current.fingerprint} -> {fingerprint}" + ("" if apply else
             " (valid and within policy; recorded as proposed, not applied: apply it to edit)")]
    if logic_changed:
        notes.append(f"the logic of {name} changed: its running version keeps the declaration it recorded; "
                     f"replay it into a new version to build the new logic: `kappa replay {name}`")
    return DeclarationChange(name, event, rec, spec, fingerprint, logic_changed, notes, analysis)


def withdraw(settings: Settings, name: str, fingerprint: str, *, reason: str, who: str = "dagster",
             run_id: str | None = None) -> Declaration:
    """Undo the change that made ``fingerprint`` the active text of declaration ``name`` (Dagster's
    reload step calls it when the code location fails to load with it, so the location loads
    again): an ``added`` declaration is ``retired``; an ``edited`` one gets the text it replaced
    back, as an ``edited`` event replacing ``fingerprint``. ``reason`` is recorded. Returns the
    event recorded. Raises :class:`DeclarationError` when ``fingerprint`` is no longer the active
    text (someone changed it since: nothing is withdrawn)."""
    log = Declarations(settings)
    events = log.events(name)
    current = log.active(events).get(name)
    label = declaration_label(name)
    if current is None or current.fingerprint != fingerprint:
        raise DeclarationError(f"{label}: not withdrawn: the active text is "
                               f"{current.fingerprint if current else 'none'}, not {fingerprint}")
    if current.event == "added":
        return log.record(name, "retired", "", who=who, reason=reason, run_id=run_id, replaces=fingerprint)
    before = events[:events.index(current)]
    previous = next(e for e in reversed(before) if e.event in ("added", "edited") and e.fingerprint == current.replaces)
    return log.record(name, "edited", previous.yaml, who=who, reason=reason, run_id=run_id, replaces=fingerprint)


def dbt_readers(settings: Settings, asset: str) -> list[str]:
    """The dbt models whose SQL reads ``asset`` (``{{ source('kappa', '<asset>') }}``), by file stem."""
    models = settings.project_dir / "dbt" / "models"
    pattern = re.compile(r"source\(\s*['\"]kappa['\"]\s*,\s*['\"]" + re.escape(asset) + r"['\"]\s*\)")
    return sorted(p.stem for p in models.rglob("*.sql") if pattern.search(p.read_text())) if models.is_dir() else []


def retire(settings: Settings, name: str, *, who: str | None = None, reason: str = "", run_id: str | None = None,
           runner: "Runner | None" = None) -> DeclarationChange:
    """Retire active declaration ``name``: refused (:class:`DeclarationError`) while another asset or
    a dbt model reads it, or when it is declared by a file (remove the file instead); stops its
    running versions on ``runner`` (default: :func:`kappa.runners.pick_runner`), records
    ``retired`` in the declarations log and for each version in the registry (the stable name
    stops resolving). Its tables and registry history are kept."""
    label = declaration_label(name)
    current = Declarations(settings).active().get(name)
    full = catalog(settings)
    if current is None:
        where = full.assets[name].where if name in full.assets else None
        raise DeclarationError(f"{label}: no active declaration named {name!r}"
                               + (f"; it is declared in {where}: remove the file to retire it" if where else ""))
    readers = full.downstream(name)
    direct = [n for n in readers if name in full[n].upstream]
    models = dbt_readers(settings, name)
    if direct or models:
        raise DeclarationError(f"{label}: cannot retire {name}: "
                               + "; ".join(([f"assets {direct} read it"] if direct else [])
                                           + ([f"dbt models {models} read it"] if models else []))
                               + "; retire or change them first")
    registry = Registry(settings)
    versions = registry.versions(name)
    running = [v for v in versions if v.state == "running"]
    if running:
        from kappa.runners import pick_runner

        runner = runner or pick_runner(settings)
        for v in running:
            runner.stop(name, v.version)
            registry.record(name, v.version, "stopped", reason=f"retired: {reason}".rstrip(": "))
    rec = Declarations(settings).record(name, "retired", "", who=who or default_who(), reason=reason,
                                        run_id=run_id, replaces=current.fingerprint)
    # Its versions leave the registry's live set, so the stable name stops resolving (the SQL
    # endpoint drops it) and no cut or maintenance looks for a declaration that is gone.
    for v in versions:
        if v.state != "retired":
            registry.record(name, v.version, "retired", reason=f"declaration retired: {reason}".rstrip(": "))
    notes = [f"{name} retired ({label}); stopped: {', '.join(v.name for v in running) or 'nothing was running'}"]
    if versions:
        notes.append("its stable name no longer resolves; its tables are kept: "
                     + ", ".join(f"{v.name} at {v.table_path}" for v in versions))
    return DeclarationChange(name, "retired", rec, None, current.fingerprint, notes=notes)
