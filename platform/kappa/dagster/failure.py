"""One way a Dagster op turns an expected library error into a failed step: :func:`as_failure`."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import dagster as dg

from kappa.errors import KappaError


@contextmanager
def as_failure(**metadata) -> Iterator[None]:
    """Run the block; a :class:`~kappa.errors.KappaError` raised in it (a failed query, a refused
    promotion, a bad request…) becomes a :class:`dagster.Failure` whose description is the error's
    one-line message and whose metadata is ``metadata`` (none when empty), chained to the error.
    Anything else, a ``dagster.Failure`` raised in the block included, passes through unchanged: the
    same split as the CLI's :class:`kappa.core.guard.Guard`.

    Example::

        with as_failure(asset=config.asset):
            report = promote(settings, config.asset, config.version)
    """
    try:
        yield
    except KappaError as exc:
        raise dg.Failure(description=str(exc), metadata=metadata or None) from exc
