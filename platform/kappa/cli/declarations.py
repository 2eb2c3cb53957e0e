"""``kappa declarations``: add, edit, retire and list the asset declarations recorded in the
warehouse (:mod:`kappa.lifecycle.declare`); the CLI twins of Dagster's ``add_asset``,
``edit_asset`` and ``retire_asset`` jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from kappa.cli.command import guarded
from kappa.cli.output import StatusFormat, console, format_option
from kappa.config import Settings
from kappa.core.guard import fail

declarations_app = typer.Typer(
    help="Asset declarations kept in the warehouse (beside the files of assets/): add, edit, retire, list.",
    no_args_is_help=True)

_WHO = typer.Option(None, "--who", help="Who makes the change, as recorded (default: the OS user).")
_REASON = typer.Option("", "--reason", help="Why, as recorded.")


def _read(file: Path) -> str:
    if not file.is_file():
        fail(f"{file}: no such file")
    return file.read_text()


def _show(change) -> None:
    a = change.analysis
    if a is not None:
        table = Table(title=f"{a.asset} on a sample of " + ", ".join(f"{s['version']} ({s['rows']:,} rows)"
                                                                  for s in a.sample.values())
                      + f": {a.row_count:,} rows out, {a.seconds:.1f} s")
        for col in a.schema:
            table.add_column(f"{col}\n{a.schema[col]}")
        for r in a.rows:
            table.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in a.schema))
        console.print(table)
        for c in a.checks:
            verdict = "[green]passed[/]" if c["passed"] else ("[red]FAILED[/]" if c["evaluated"] else "not evaluated")
            console.print(f"  on the sample: {c['name']}: {verdict} (observed {c['observed']})", highlight=False)
    for line in change.notes:
        console.print(line, highlight=False)


@declarations_app.command("add")
@guarded
def add_cmd(
    settings: Settings,
    file: Path = typer.Argument(..., help="The asset's YAML (the same fields as a file in assets/)."),
    apply: bool = typer.Option(False, "--apply", help="Record it as added (default: validate, check the "
                               "policy and record it as proposed only)."),
    who: Optional[str] = _WHO, reason: str = _REASON,
) -> None:
    """Validate a new asset declaration with the catalog, hold it to the run-time policy, run it on a
    sample of its upstreams (schema, rows, checks), and record it."""
    from kappa.lifecycle import declare

    _show(declare.add(settings, _read(file), apply=apply, who=who, reason=reason, sample=True))


@declarations_app.command("edit")
@guarded
def edit_cmd(
    settings: Settings,
    file: Path = typer.Argument(..., help="The declaration's new YAML (its name says which asset)."),
    expected_fingerprint: str = typer.Option(..., "--expected-fingerprint", help="The fingerprint of the text "
                                             "you edited (`kappa declarations list`); a stale edit is refused."),
    who: Optional[str] = _WHO, reason: str = _REASON,
) -> None:
    """Replace an active declaration's text; says when the logic changed (replay to build it)."""
    from kappa.lifecycle import declare

    _show(declare.edit(settings, _read(file), expected_fingerprint, who=who, reason=reason, sample=True))


@declarations_app.command("retire")
@guarded
def retire_cmd(settings: Settings, name: str, who: Optional[str] = _WHO, reason: str = _REASON) -> None:
    """Retire an active declaration (refused while assets or dbt models read it); stops its running
    versions and keeps its tables."""
    from kappa.lifecycle import declare

    _show(declare.retire(settings, name, who=who, reason=reason))


@declarations_app.command("list")
@guarded
def list_cmd(
    settings: Settings,
    fmt: StatusFormat = format_option(),
    all_events: bool = typer.Option(False, "--all", help="Every event, not only the active declarations."),
) -> None:
    """The active declarations (name, fingerprint, event, who, when), or with --all every event."""
    from kappa.delta.declarations import Declarations

    log = Declarations(settings)
    events = log.events()
    rows = events if all_events else list(log.active(events).values())
    if fmt == StatusFormat.json:
        print(json.dumps([r.to_dict() for r in rows]))
        return
    table = Table(title="declarations" + (" (every event)" if all_events else " (active)"))
    for col in ("asset", "event", "fingerprint", "who", "at (UTC)", "reason"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.asset, r.event, r.fingerprint, r.who, f"{r.at:%Y-%m-%d %H:%M:%S}", r.reason)
    console.print(table)


@declarations_app.command("evolve")
@guarded
def evolve_cmd(
    settings: Settings,
    asset: str = typer.Argument(..., help="A parse (silver) asset whose records carry fields it does not declare."),
    apply: bool = typer.Option(False, "--apply", help="Write the evolved declaration (its file in assets/, or "
                               "an edit recorded in the warehouse); default: show it only."),
    who: Optional[str] = _WHO, reason: str = _REASON,
) -> None:
    """Schema drift into the declaration: the fields the asset's records carried and it lacks, and
    the declared fields whose values were of another type (its gate's schema_drift check), typed from
    their values; the proposal is tried on the rescued records read back from the log. A replay then
    builds the next version with them as columns."""
    from kappa.lifecycle.evolve import propose, sample_problems, try_on_sample
    from kappa.streaming.session import spark_session

    ev = propose(settings, asset)
    if not ev.fields:
        console.print(f"{asset}/v{ev.version}: no schema drift: nothing to evolve", highlight=False)
        return
    sample = try_on_sample(settings, ev, spark_session(settings))
    table = Table(title=f"{asset}/v{ev.version}: schema drift from {ev.origin}, tried on {sample['read']:,} of "
                        f"{sample['records']:,} rescued records read back from the log")
    for col in ("field", "declared", "proposed type", "records", "sample", "parsed on the sample"):
        table.add_column(col)
    for name, f in ev.fields.items():
        table.add_row(name, f["was"] or "(undeclared)", f["type"], f"{f['records']:,}",
                      "" if f["sample"] is None else str(f["sample"])[:60], f"{sample['parsed'].get(name, 0):,}")
    console.print(table)
    problems = sample_problems(sample)
    for line in problems:
        console.print(f"on the sample: {line}", highlight=False, markup=False)
    if not apply:
        console.print(ev.proposed, highlight=False, markup=False)
        console.print(f"the declaration above is proposed, not written: --apply writes it, then `kappa replay {asset}`",
                      highlight=False)
        return
    if problems:
        fail(f"{ev.origin}: evolve: not applied: the proposal does not hold the drift on the sample "
             f"({problems[0]}); edit the declaration by hand")
    if ev.path is None:  # recorded in the warehouse: an edit of the active text
        from kappa.delta.declarations import Declarations
        from kappa.lifecycle import declare

        current = Declarations(settings).active()[asset]
        _show(declare.edit(settings, ev.proposed, current.fingerprint, who=who,
                           reason=reason or "kappa declarations evolve", sample=False))
    else:
        ev.path.write_text(ev.proposed)
        console.print(f"wrote {ev.path}", highlight=False)
    console.print(f"`kappa replay {asset}` builds v{ev.version + 1} with {', '.join(ev.fields)} from the log",
                  highlight=False)
