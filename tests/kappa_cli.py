"""The `kappa` command in tests, one helper for each way of running it:

- :func:`invoke_kappa`, in this process (Typer's ``CliRunner``): for what the CLI parses, prints and
  refuses (help, option checks, one-line errors). No interpreter start and no imports per call.
- :func:`run_kappa`, the installed ``kappa`` in a fresh process, as a user runs it: for what crosses a
  process boundary (signals, exit codes of a killed run, the JVM's output, file descriptors, a
  service left running, an environment of its own).

Both print as on a 200-column terminal, so Rich wraps no message a test reads."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The installed console script (``[project.scripts]``), beside this interpreter.
KAPPA = str(Path(sys.executable).parent / "kappa")
COLUMNS = 200


def settings_env(settings) -> dict[str, str]:
    """The variables that point a `kappa` command at ``settings``' home, assets and broker."""
    return {"KAPPA_HOME": str(settings.home), "KAPPA_ASSETS_DIR": str(settings.assets_dir),
            "KAPPA_KAFKA_PORT": str(settings.kafka_port),
            "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port)}


def clean_env() -> dict[str, str]:
    """This process's environment without any ``KAPPA_*`` variable (the caller adds its test's own
    state), except the driver JIT every test process uses (tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    return {**env, "KAPPA_SPARK_DRIVER_JIT": os.environ.get("KAPPA_SPARK_DRIVER_JIT", "tiered")}


def run_kappa(*args: str, env: Mapping[str, str] | None = None, timeout: float = 180, stdin: str | None = None,
              cwd: Path = REPO, **popen) -> subprocess.CompletedProcess:
    """``kappa ARGS`` in a new process with the whole environment ``env`` (default: this process's)
    plus ``COLUMNS``; text output captured; ``popen``: more keyword arguments of ``subprocess.run``
    (``start_new_session``). Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    full = {**(os.environ if env is None else env), "COLUMNS": str(COLUMNS)}
    return subprocess.run([KAPPA, *args], capture_output=True, text=True, env=full, timeout=timeout, cwd=cwd,
                          input=stdin, **popen)


def invoke_kappa(*args: str, env: Mapping[str, str | None] | None = None):
    """``kappa ARGS`` in this process (Typer's ``CliRunner``; ``env`` set, a ``None`` value unset, for
    the call only) -> what :func:`run_kappa` returns (``returncode``, ``stdout``, ``stderr``), so one
    assertion reads either. An exception the command lets through is raised here, so the test fails
    with the traceback a user would have seen.

    The command's callback routes the library loggers to its home's log file (kappa.core.logs); what
    it changes there, and the width of Kappa's consoles, is put back after the call."""
    from rich.console import Console
    from typer.testing import CliRunner

    from kappa.cli.app import app
    from kappa.cli.output import console
    from kappa.core import guard, logs

    loggers = [logging.getLogger(name) for name in logs.LIBRARY_LOGGERS]
    saved = [(lg, list(lg.handlers), lg.level) for lg in loggers]
    routed = logs._routed
    consoles: list[Console] = [console, guard.err_console]
    widths = [c._width for c in consoles]
    try:
        for c in consoles:
            c.width = COLUMNS
        result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(COLUMNS), **(env or {})})
    finally:
        for c, w in zip(consoles, widths):
            c._width = w
        for lg, handlers, level in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
        logs._routed = routed
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["kappa", *args], result.exit_code, result.stdout, result.stderr)
