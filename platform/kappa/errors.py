"""The one base of Kappa's expected errors.

An expected error means bad input or a bad environment (a malformed asset file, a broker that does
not answer, retention that no longer covers a replay, a gate that refused), not a bug in Kappa: its
message is the whole story. The ``kappa`` command prints it as one line and exits 1
(:class:`kappa.core.guard.Guard`); a Dagster run fails with it as its message, without a traceback. Every
such error class derives from :class:`KappaError`, so neither front end keeps a list of them.

This module imports nothing of the package, so any module may import it.
"""

from __future__ import annotations


class KappaError(Exception):
    """Base of every error Kappa expects (see the module docstring). Catch this, not a list."""
