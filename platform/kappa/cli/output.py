"""What the ``kappa`` command prints: one console, tables of results and gates, micro-batch progress
lines, and query results as a table, CSV or JSON."""

from __future__ import annotations

import sys
from enum import Enum

import typer
from rich.console import Console
from rich.table import Table

#: The console every command prints to (progress and results; errors go to stderr, :mod:`kappa.core.guard`).
console = Console()


class OutputFormat(str, Enum):
    """``--format`` of query results."""

    table = "table"
    csv = "csv"
    json = "json"


class StatusFormat(str, Enum):
    """``--format`` of the status commands: text for people, json for scripts."""

    text = "text"
    json = "json"


def format_option(help: str = "text or json", default: Enum = StatusFormat.text):
    """The one ``--format`` option of every command: a ``typer.Option`` whose choices are those of
    ``default``'s enum (:class:`StatusFormat`, or :class:`OutputFormat` for query results), ``help``
    its help text."""
    return typer.Option(default, "--format", help=help)


def progress_printer():
    """An ``on_progress`` callback that prints one line per non-empty micro-batch of each asset
    (records read and its ``triggerExecution`` time, seconds)."""
    from kappa.runners.local import records_read

    last: dict[str, int] = {}

    def show(asset: str, p: dict) -> None:
        if last.get(asset) == p.get("batchId"):
            return
        last[asset] = p.get("batchId")
        read = records_read([p])
        if read:
            console.print(
                f"  {asset}: batch {p['batchId']} {read:,} records in "
                f"{p.get('durationMs', {}).get('triggerExecution', 0) / 1000:.1f} s", highlight=False
            )

    return show


def results_table(results) -> Table:
    """The ``caught up`` table of :class:`~kappa.runners.base.AssetRunResult` rows."""
    table = Table(title="caught up")
    for col in ("asset", "version", "rows", "read", "quarantined", "late (kept)", "dropped late", "seconds"):
        table.add_column(col, justify="left" if col == "asset" else "right")
    for r in results:
        table.add_row(r.asset, f"v{r.version}", f"{r.rows:,}", f"{r.input_rows:,}", f"{r.quarantined:,}",
                      f"{r.late_events:,}", f"{r.dropped_by_watermark:,}", f"{r.seconds:.1f}")
    return table


def print_frame(df, fmt: OutputFormat) -> None:
    """Print a pandas DataFrame as a table (console), CSV or JSON records (stdout)."""
    if fmt == OutputFormat.csv:
        sys.stdout.write(df.to_csv(index=False))
    elif fmt == OutputFormat.json:
        sys.stdout.write(df.to_json(orient="records", date_format="iso") + "\n")
    else:
        table = Table()
        for col in df.columns:
            table.add_column(str(col))
        for row in df.itertuples(index=False):
            table.add_row(*["" if v is None else str(v) for v in row])
        console.print(table)


def gate_table(report) -> Table:
    """A gate report (:class:`~kappa.quality.gate.GateReport`) as a table of its checks."""
    table = Table(title=f"gate: {report.asset} v{report.version} — {'PASSED' if report.passed else 'FAILED'}")
    for col in ("check", "blocking", "result", "observed", "expected"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        result = "[green]pass[/]" if c.passed else ("[red]FAIL[/]" if c.blocking else "[yellow]differs[/]")
        table.add_row(c.name, "yes" if c.blocking else "no", result, str(c.observed), c.expected)
    return table
