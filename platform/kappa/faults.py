"""Deterministic fault points (``KAPPA_FAULT``, :class:`Fault`): where a streaming asset's
micro-batch kills its own driver, for the fault-point tests and chaos drills. The settings read the
variable (:attr:`kappa.config.Settings.fault`); the writers call :meth:`Fault.hit` at each point.
Imports nothing of ``kappa``: it sits beside :mod:`kappa.errors` at the bottom of the layers."""

from __future__ import annotations

import os
from dataclasses import dataclass


#: Where a streaming asset's micro-batch can be stopped by ``KAPPA_FAULT``, in the order a batch
#: reaches them: the batch is computed and nothing written; the quarantine append committed; the
#: late-events append committed; the asset's table committed (append or MERGE); the batch function
#: returned (Spark has not yet written the batch to the checkpoint's commit log).
FAULT_POINTS = ("before_write", "after_quarantine_commit", "after_late_commit", "after_table_commit", "after_batch")
#: ``KAPPA_FAULT``'s form, as error messages state it.
FAULT_FORM = f"<asset>:<point>:<batch_id>, <point> one of {', '.join(FAULT_POINTS)}, <batch_id> an integer >= 0"


@dataclass(frozen=True)
class Fault:
    """A deterministic fault point: the process exits at once (``os._exit(137)``, as SIGKILL would
    leave it: no ``finally``, no Spark shutdown) when micro-batch ``batch_id`` of ``asset`` reaches
    ``point`` (one of :data:`FAULT_POINTS`)."""

    asset: str
    point: str
    batch_id: int

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """``<asset>:<point>:<batch_id>`` -> Fault. Raises ValueError saying what is wrong (the
        caller names the variable and :data:`FAULT_FORM`)."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[0]:
            raise ValueError("not three fields")
        asset, point, batch = parts
        if point not in FAULT_POINTS:
            raise ValueError(f"unknown point {point!r}")
        if not batch.isdigit():
            raise ValueError(f"batch id {batch!r} is not a non-negative integer")
        return cls(asset, point, int(batch))

    def hit(self, asset: str, point: str, batch_id: int) -> None:
        """Kill the driver now if (asset, point, batch_id) is this fault point: its process group
        when it leads one, else Spark's JVM (SIGKILL: it must not finish the batch or write the
        commit log on its own) and then this Python process (``os._exit(137)``)."""
        if (asset, point, batch_id) == (self.asset, self.point, self.batch_id):
            import signal
            import sys

            print(f"KAPPA_FAULT: {asset} batch {batch_id} at {point}: killing the driver (SIGKILL)",
                  file=sys.stderr, flush=True)
            if os.getpgrp() == os.getpid():
                # Leader of its own process group (a shell job, or started in a new session): the
                # whole group at once, as `kappa chaos driver` kills a driver: the JVM and any
                # Python workers too, none left holding the batch or the output pipes.
                os.killpg(os.getpgrp(), signal.SIGKILL)
            jvm = getattr(getattr(sys.modules.get("pyspark").SparkContext, "_gateway", None), "proc", None) \
                if "pyspark" in sys.modules else None
            if jvm is not None:
                os.kill(jvm.pid, signal.SIGKILL)
            os._exit(137)
