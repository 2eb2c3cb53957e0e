"""The one shape of a local real part (:class:`LocalService`): start, stop, status, ensure_running.

Each part — the Kafka broker (:mod:`kappa.kafka.broker`), PostgreSQL (:mod:`kappa.cdc.postgres`),
the Kafka Connect worker (:mod:`kappa.cdc.connect`), the SQL endpoint (:mod:`kappa.services.serve`),
the S3-compatible object store (:mod:`kappa.services.objectstore`) and the test control plane
(:mod:`kappa.services.cluster`) — keeps its state under ``KAPPA_HOME`` and
declares one ``SERVICE``; :func:`kappa.services.services` lists them, and the CLI builds
``kappa <name> start|stop|status [--format json]`` for each from that one list
(:mod:`kappa.cli.services`). A new part is one module with its four functions, a status with
``up``, ``to_json()`` and ``summary()``, and one line in the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from kappa.config import Settings


class ServiceStatus(Protocol):
    """What every part's status says: whether it is up, itself as JSON (``kappa <name> status
    --format json``) and as short lines of text (the first says where it listens)."""

    up: bool

    def to_json(self) -> str:
        """The status as one JSON object (every field of the dataclass)."""
        ...

    def summary(self) -> list[str]:
        """The status as lines of plain text, where it listens first."""
        ...


@dataclass(frozen=True)
class LocalService:
    """One local part. ``name``: its CLI group (``kappa <name> …``); ``title``: what it is, as the
    console names it; ``help``: the group's help. ``start(settings, timeout_s)`` starts it and waits
    until it answers (raising the part's :class:`~kappa.errors.KappaError` when it is already running
    or cannot start); ``stop(settings)`` stops it and returns what stopped (a pid, or name -> pid);
    ``status(settings)`` never raises for a part that is down; ``ensure_running(settings, timeout_s)``
    returns the running part's status, starting it if needed. ``start_timeout_s``: the default wait
    (seconds)."""

    name: str
    title: str
    help: str
    start: Callable[["Settings", float], ServiceStatus]
    stop: Callable[["Settings"], object]
    status: Callable[["Settings"], ServiceStatus]
    ensure_running: Callable[["Settings", float], ServiceStatus]
    start_timeout_s: float
