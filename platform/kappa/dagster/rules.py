"""What the code location asks of a declaration beyond the models (:mod:`kappa.spec`): checked when
the location loads (:mod:`kappa.dagster.component`) and before ``add_asset``/``edit_asset`` record
a declaration (:mod:`kappa.dagster.declare`), so a recorded declaration never breaks the location."""

from __future__ import annotations

import re

from kappa.dagster.names import FRESHNESS_CHECK, HEALTH_CHECK
from kappa.spec import AssetSpec, SpecError

_OWNER_RE = re.compile(r"^(team:[A-Za-z0-9_.\-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")


def declared_checks(spec: AssetSpec) -> list[str]:
    """The Dagster asset-check names of ``spec``'s expectations (:func:`kappa.quality.gate.check_names`).
    Raises :class:`SpecError` when two are the same or one takes a sensor check's name
    (``query_health``, ``freshness``)."""
    from kappa.quality.gate import check_names

    names = list(check_names(spec))
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"{spec.where}: expectations: check names must be unique, repeated: {dupes}")
    for reserved in (HEALTH_CHECK, FRESHNESS_CHECK):
        if reserved in names:
            raise SpecError(f"{spec.where}: expectations: {reserved!r} is reserved for the query sensor")
    return names


def check_dagster_rules(spec: AssetSpec) -> None:
    """What the code location asks of a declaration beyond the models: an ``owner`` that is an
    email address or ``team:<name>``, and unique check names (:func:`declared_checks`). Raises
    :class:`SpecError` naming the file (or ``declarations:<name>``) and the field."""
    if spec.owner is not None and not _OWNER_RE.match(spec.owner):
        raise SpecError(f"{spec.where}: owner: {spec.owner!r} must be an email address or 'team:<name>'")
    declared_checks(spec)
