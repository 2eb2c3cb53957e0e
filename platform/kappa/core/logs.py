"""A quiet console: where the logs of the libraries under Kappa go.

A ``kappa`` command's console shows Kappa's own progress and results. Whatever else the process
and its children write goes to one file per process, :func:`log_file` =
``<KAPPA_HOME>/logs/kappa-<pid>.log``, created on the first line written to it:

* Spark's JVM: its stdout and stderr, so log4j2's console appender (``resources/log4j2.properties``,
  WARN and up) and the JVM's own start-up notes;
* the Python workers Spark starts (the UDF workers, the TransformWithStateInPandas driver worker
  and its ``print`` calls): Spark copies their stdout and stderr to the JVM's stderr
  (``PythonWorkerFactory``'s redirect threads), so they land in the same file;
* pyspark's JSON log of a failed query (:data:`PYSPARK_LOGGERS`);
* Python ``logging`` of py4j (logger ``py4j``) and of the confluent-kafka clients, which log
  through :data:`LIBRDKAFKA` (their ``logger`` setting) instead of librdkafka's default, a line
  such as ``%4|…|GETPID|rdkafka#producer-1| …`` written straight to the process's stderr.

``KAPPA_VERBOSE=true`` (``kappa --verbose``) leaves all of it on the console instead, as before.
The Kappa processes that run as services (broker, Connect, ``kappa serve``, PostgreSQL) already
log to files of their own (:func:`kappa.core.processes.spawn`); a SparkApplication's driver on
Kubernetes logs to its pod (spark-submit started its JVM, not :func:`spark_output`).

Example::

    settings = load_settings()
    route(settings)                   # py4j and librdkafka to the log file (or the console)
    Producer({..., "logger": LIBRDKAFKA})
    with spark_output(settings) as popen_kwargs:   # the JVM's output to the file
        gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kappa.config import Settings

#: confluent-kafka clients log through this logger (pass it as their ``logger`` setting). Its
#: records are served by the client's ``poll``/``flush``; an AdminClient never polled drops them.
LIBRDKAFKA = logging.getLogger("kappa.librdkafka")
#: Python loggers of libraries whose records belong in the log file, not on the console.
LIBRARY_LOGGERS = ("py4j", LIBRDKAFKA.name)
#: pyspark's loggers (``PySparkLogger``, each with a stderr handler of its own), routed once Spark starts.
PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_routed: Path | None = None


def log_file(settings: Settings) -> Path:
    """This process's log file: ``<home>/logs/kappa-<pid>.log`` (not created here)."""
    return settings.logs_dir / f"kappa-{os.getpid()}.log"


def written_log() -> Path | None:
    """The log file this process has written to, if any: what a failure points the user at."""
    if _routed is not None and _routed.is_file() and _routed.stat().st_size > 0:
        return _routed
    return None


def route(settings: Settings) -> None:
    """Send the records of :data:`LIBRARY_LOGGERS` to :func:`log_file` (to stderr when
    ``settings.verbose``), never to the root logger's handlers. Idempotent."""
    global _routed
    target = None if settings.verbose else log_file(settings)
    if _routed == target and target is not None:
        return
    handler = logging.StreamHandler(sys.stderr) if target is None else _LazyFileHandler(target)
    handler.setFormatter(logging.Formatter(_FORMAT))
    for name in LIBRARY_LOGGERS:
        _replace_handlers(logging.getLogger(name), handler, lambda h: getattr(h, "_kappa", False))
    # librdkafka filters by its own log_level (6, info); let every record it sends through.
    LIBRDKAFKA.setLevel(logging.INFO)
    _routed = target


@contextmanager
def spark_output(settings: Settings) -> Iterator[dict]:
    """``with spark_output(settings) as popen_kwargs:`` the keyword arguments of ``Popen`` for
    :func:`pyspark.java_gateway.launch_gateway`: the JVM's stdout and stderr appended to
    :func:`log_file` (``{}`` when ``settings.verbose``: the JVM inherits the console). The file is
    closed on exit, the JVM keeps its own descriptor.

    Also routes the Python loggers (:func:`route`) and pyspark's own: a failed query's
    ``*QueryContextLogger`` (``pyspark.errors.exceptions.base``) writes the error and its Java
    stack trace as one JSON line to stderr, through a handler of its own, before the exception
    reaches Kappa, which prints the error in one line."""
    route(settings)
    if settings.verbose:
        yield {}
        return
    path = log_file(settings)
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_LOGGERS:
        # PySparkLogger.addHandler gives the handler pyspark's JSON formatter: one handler each.
        _replace_handlers(PySparkLogger.getLogger(name), _LazyFileHandler(path),
                          lambda h: isinstance(h, logging.StreamHandler))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Append mode (O_APPEND) on both sides: the JVM and this process's handlers share the file
    # without overwriting each other's lines.
    with open(path, "ab") as out:
        yield {"stdout": out, "stderr": subprocess.STDOUT}


def _replace_handlers(logger: logging.Logger, handler: logging.Handler, old) -> None:
    """``handler`` in place of ``logger``'s handlers for which ``old(h)`` holds; no propagation."""
    for h in [h for h in logger.handlers if old(h)]:
        logger.removeHandler(h)
        h.close()
    handler._kappa = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False


class _LazyFileHandler(logging.FileHandler):
    """A FileHandler that creates its folder and file on the first record: a command that logs
    nothing (``kappa kafka status``) leaves no empty log behind."""

    def __init__(self, path: Path):
        super().__init__(path, delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()
