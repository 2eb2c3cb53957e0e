"""How a ``kappa`` command runs: under :class:`~kappa.core.guard.Guard`, with the settings read
once (:func:`guarded`)."""

from __future__ import annotations

import functools
import inspect
from typing import Callable, TypeVar


from kappa.config import load_settings
from kappa.core.guard import Guard

F = TypeVar("F", bound=Callable)


def guarded(command: F) -> F:
    """``command`` run under :class:`~kappa.core.guard.Guard` (Kappa's expected errors: one line on
    stderr, exit status 1). When its first parameter is named ``settings``, it receives
    :func:`kappa.config.load_settings` of this process, and Typer does not see that parameter.

    Example::

        @app.command("gate")
        @guarded
        def gate(settings: Settings, asset: str, version: int) -> None:
            report = run_gate(settings, asset, version)
    """
    signature = inspect.signature(command)
    params = list(signature.parameters.values())
    takes_settings = bool(params) and params[0].name == "settings"

    @functools.wraps(command)
    def run(*args, **kwargs):
        with Guard():
            return command(load_settings(), *args, **kwargs) if takes_settings else command(*args, **kwargs)

    if takes_settings:  # what Typer reads: the options and arguments only
        run.__signature__ = signature.replace(parameters=params[1:])
    return run  # type: ignore[return-value]

