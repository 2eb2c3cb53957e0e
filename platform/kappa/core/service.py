"""The one shape of a local real part (:class:`LocalService`): start, stop, status, ensure_running.

Each part — the Kafka broker (:mod:`kappa.kafka.broker`), PostgreSQL (:mod:`kappa.cdc.postgres`),
the Kafka Connect worker (:mod:`kappa.cdc.connect`), the SQL endpoint (:mod:`kappa.services.serve`),
the S3-compatible object store (:mod:`kappa.services.objectstore`) and the test control plane
(:mod:`kappa.services.cluster`) — keeps its state under ``KAPPA_HOME`` and
declares one ``SERVICE``; :func:`kappa.services.services` lists them, and the CLI builds
``kappa <name> start|stop|status [--format json]`` for each from that one list
(:mod:`kappa.cli.services`). A new part is one module with its start, stop and status, a status
dataclass deriving :class:`ServiceStatus` (``up`` and ``summary()``; ``to_json()`` comes with the
base), a :class:`LocalService` subclass naming them (``ensure_running`` comes with the base), and one
line in the list.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from kappa.config import Settings


class ServiceStatus:
    """What every part's status says (a dataclass deriving this): whether it is ``up``, itself as
    JSON (``kappa <name> status --format json``) and as short lines of text (the first says where it
    listens)."""

    up: bool

    def to_json(self) -> str:
        """The status as one JSON object (every field of the dataclass)."""
        return json.dumps(asdict(self))

    def summary(self) -> list[str]:
        """The status as lines of plain text, where it listens first."""
        raise NotImplementedError


class LocalService:
    """One local part; a module declares its own subclass and one instance, ``SERVICE``.

    ``name``: its CLI group (``kappa <name> …``); ``title``: what it is, as the console names it;
    ``help``: the group's help; ``start_timeout_s``: the default wait (seconds). A subclass gives
    :meth:`start`, :meth:`stop` and :meth:`status` (usually the module's functions, as
    ``staticmethod``); :meth:`ensure_running` comes from here unless the part needs more."""

    name: ClassVar[str]
    title: ClassVar[str]
    help: ClassVar[str]
    start_timeout_s: ClassVar[float]

    def start(self, settings: "Settings", timeout_s: float) -> ServiceStatus:
        """Start the part and wait until it answers (at most ``timeout_s`` seconds); raises the
        part's :class:`~kappa.errors.KappaError` when it is already running or cannot start."""
        raise NotImplementedError

    def stop(self, settings: "Settings") -> object:
        """Stop the part; returns what stopped (a pid, or name -> pid)."""
        raise NotImplementedError

    def status(self, settings: "Settings") -> ServiceStatus:
        """The part's status; never raises for a part that is down."""
        raise NotImplementedError

    def ensure_running(self, settings: "Settings", timeout_s: float | None = None, **start_options) -> ServiceStatus:
        """The running part's status, started (with ``start_options``, waiting at most ``timeout_s``
        seconds, default :attr:`start_timeout_s`) if it is not up. Raises as :meth:`start`."""
        st = self.status(settings)
        if st.up:
            return st
        return self.start(settings, timeout_s=self.start_timeout_s if timeout_s is None else timeout_s,
                          **start_options)
