"""``kappa cdc simulate|latency``: changes to the operational database, and how long each takes to
reach its current-state table."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kappa.cli.command import guarded
from kappa.cli.output import StatusFormat, console, format_option
from kappa.config import Settings
from kappa.core.guard import positive_option

cdc_app = typer.Typer(help="Change data capture: changes to the operational database.", no_args_is_help=True)
@cdc_app.command("simulate")
@guarded
def cdc_simulate(
    settings: Settings,
    changes: int = typer.Option(..., "--changes", min=1, help="How many row changes (statements) to apply."),
    seed: int = typer.Option(0, help="Seed of the change generator (same seed + same data = same changes)."),
    rate: Optional[float] = typer.Option(None, callback=positive_option, help="Changes per second (default: as fast as PostgreSQL commits)."),
) -> None:
    """Apply realistic transactions of 1-5 statements to the operational tables: plane updates,
    airline renames, fleet reassignments, new planes, retired planes, planes leaving the fleet."""
    from kappa.cdc.simulate import simulate

    with Progress(TextColumn("[bold]changes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("changes", total=changes)
        report = simulate(settings, changes, seed=seed, rate=rate, on_progress=lambda n: progress.advance(task, n))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items()))
    console.print(f"{report.changes:,} changes in {report.transactions:,} transactions in {report.seconds:.1f} s "
                  f"({kinds})" + (f"; {report.retries} transactions retried after a lost connection"
                                   if report.retries else ""), highlight=False)


@cdc_app.command("latency")
@guarded
def cdc_latency(
    settings: Settings,
    changes: int = typer.Option(200, "--changes", min=1, help="How many changes to apply while measuring."),
    rate: float = typer.Option(20.0, callback=positive_option, help="Changes per second."),
    seed: int = typer.Option(0, help="Seed of the change generator."),
    fmt: StatusFormat = format_option(),
) -> None:
    """Measure change-to-table latency: from a change's commit in PostgreSQL to the Delta commit that
    makes it visible in its current-state table (p50, p99, max per table), with the changelog
    assets running continuously in this process, and judge it against the targets (p50 <= 2 s,
    p99 <= 5 s: met, missed or not evaluated). Needs PostgreSQL and Connect running."""
    from dataclasses import asdict

    from kappa.harness.cdc_latency import measure

    report = measure(settings, changes, rate=rate, seed=seed,
                     say=(lambda m: None) if fmt is StatusFormat.json else (lambda m: console.print(m)))
    if fmt is StatusFormat.json:
        print(json.dumps(asdict(report)))
        return
    table = Table("table", "changes", "p50 s", "p99 s", "max s")
    for name, p in [*report.tables.items(), ("all", report.overall)]:
        table.add_row(name, str(p["n"]), *(str(p.get(k, "not evaluated")) for k in ("p50_s", "p99_s", "max_s")))
    console.print(table)
    console.print(f"{changes} changes applied in {report.simulate_s} s; the last one visible {report.settle_s} s later")
    from kappa.harness.bench.report import describe_per_batch

    for asset, pb in report.per_batch.items():
        console.print(describe_per_batch(asset, pb), highlight=False)
    for j in report.judged:
        verdict = "not evaluated" if j["met"] is None else ("[green]met[/]" if j["met"] else "[red]missed[/]")
        console.print(f"target {j['target']}: {j['value'] if j['value'] is not None else '-'} s, {verdict}")
