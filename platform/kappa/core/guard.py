"""How the ``kappa`` command reports what Kappa expects to go wrong: one clear line on stderr and
exit status 1, no traceback, and where the process's log is when it wrote one (:mod:`kappa.core.logs`);
and the checks of option values Typer cannot express."""

from __future__ import annotations

import signal
import sys
from typing import Optional

import typer
from rich.console import Console

from kappa.core import logs
from kappa.errors import KappaError

err_console = Console(stderr=True)


def fail(message: str) -> None:
    """Print ``error: message`` on stderr, and the path of this process's log if it wrote one, and
    exit with status 1."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    point_at_log()
    raise typer.Exit(1)


def point_at_log() -> None:
    """``log: <path>`` on stderr when this process wrote to its log file (Spark's JVM, py4j,
    librdkafka: :func:`kappa.core.logs.written_log`), where the details of a failure are."""
    path = logs.written_log()
    if path is not None:
        err_console.print(f"log: {path}", highlight=False, soft_wrap=True)


class Guard:
    """``with Guard():`` turns Kappa's expected errors (any :class:`kappa.errors.KappaError`) into a
    clear message and exit status 1; anything else is a bug and keeps its traceback."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and isinstance(exc, KappaError):
            fail(str(exc))
        if exc is not None and not isinstance(exc, (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit)):
            point_at_log()  # a bug: its traceback follows, Spark's side of it is in the log
        return False


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in the main thread, so the command's ``finally``
    blocks run (stopping the broker and processes it started), as they do on Ctrl-C."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def interval_option(value: Optional[str]) -> Optional[str]:
    """Typer callback: an interval like ``'5 seconds'`` (:func:`kappa.spec.interval_seconds`)."""
    from kappa.spec import interval_seconds

    if value is not None:
        try:
            interval_seconds(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def positive_option(value: Optional[float]) -> Optional[float]:
    """Typer callback: a number above 0."""
    if value is not None and value <= 0:
        raise typer.BadParameter(f"{value} is not above 0")
    return value
