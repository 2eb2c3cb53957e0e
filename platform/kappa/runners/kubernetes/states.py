"""The Spark operator's application states mapped to Kappa's front-end-neutral
:class:`~kappa.runners.base.Outcome` (a pure mapping, tested for every state of the pinned operator)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kappa.runners.base import Outcome

__all__ = ["Outcome", "STATE_OUTCOMES", "error_message", "outcome_of", "state_of"]

#: Every ``ApplicationStateType`` of spark-operator v2 (api/v1beta2/sparkapplication_types.go).
#: COMPLETED and SUCCEEDING are resolved by :func:`outcome_of` (they depend on ``streaming``).
STATE_OUTCOMES: dict[str, Outcome] = {
    "": Outcome.PENDING,  # New: the operator has not picked it up yet
    "SUBMITTED": Outcome.PENDING,
    "PENDING_RERUN": Outcome.PENDING,
    "INVALIDATING": Outcome.PENDING,  # spec changed: the operator tears down and re-submits
    "RESUMING": Outcome.PENDING,
    "RUNNING": Outcome.RUNNING,
    "FAILING": Outcome.RETRYING,
    "SUBMISSION_FAILED": Outcome.RETRYING,
    "SUSPENDING": Outcome.SUSPENDED,
    "SUSPENDED": Outcome.SUSPENDED,
    "FAILED": Outcome.FAILED,
    "UNKNOWN": Outcome.UNKNOWN,
    "COMPLETED": Outcome.SUCCEEDED,
    "SUCCEEDING": Outcome.SUCCEEDED,
}


def state_of(app: Mapping[str, Any] | None) -> str:
    """``status.applicationState.state`` of a SparkApplication ("" before the operator set it)."""
    if not app:
        return ""
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def outcome_of(app_or_state: Mapping[str, Any] | str | None, *, streaming: bool = True) -> Outcome:
    """Map a SparkApplication (or its state string) to an :class:`Outcome`.

    ``streaming=True`` (the default; every Kappa asset version is a long-running query): COMPLETED
    and SUCCEEDING are FAILED. The operator reports a driver that exited with code 0 as completed,
    but a streaming query only ends when it is stopped (by deleting the application) or when it
    crashed in a way that still let the Python process exit cleanly. ``streaming=False`` (a bounded
    available-now run) maps them to SUCCEEDED. An unknown state maps to UNKNOWN, never raises.
    """
    state = app_or_state if isinstance(app_or_state, str) or app_or_state is None else state_of(app_or_state)
    state = (state or "").upper()
    if state in ("COMPLETED", "SUCCEEDING"):
        return Outcome.FAILED if streaming else Outcome.SUCCEEDED
    return STATE_OUTCOMES.get(state, Outcome.UNKNOWN)


def error_message(app: Mapping[str, Any] | None) -> str:
    """The operator's error message for a failed application, or a plain explanation for a
    streaming application reported completed."""
    state = state_of(app)
    msg = str((((app or {}).get("status") or {}).get("applicationState") or {}).get("errorMessage") or "")
    if not msg and state in ("COMPLETED", "SUCCEEDING"):
        return "the streaming query's driver exited although a streaming query never completes on its own"
    return msg
