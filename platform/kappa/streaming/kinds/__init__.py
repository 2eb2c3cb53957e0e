"""The kinds registry: each transform kind is one module of this package that declares a
:class:`~kappa.streaming.kinds.base.Kind` (its query builder and what the gate, forget, the runners,
promotion and Dagster must know of it), plus one entry in :data:`KINDS`.

Only this registry and the declaration models (:mod:`kappa.spec`, which validate a kind's fields)
know kind names; everything else asks :func:`kind_of`. Adding a kind: a model in
:mod:`kappa.spec.transforms` (and its field on :class:`~kappa.spec.transforms.Transform`), a module
here with its ``KIND``, and its line below. :mod:`~kappa.streaming.kinds.sliding` is a whole kind in
one module, frame and processor included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kappa.streaming.kinds import (
    changelog,
    join,
    lookup,
    materialized_view,
    parse,
    pattern,
    python,
    raw,
    sliding,
    sql,
    window,
)
from kappa.streaming.kinds.base import Kind

if TYPE_CHECKING:
    from kappa.spec import AssetSpec

#: Every transform kind by name (the keys are :data:`kappa.spec.transforms.TRANSFORM_KINDS`).
KINDS: dict[str, Kind] = {k.name: k for k in (
    raw.KIND, parse.KIND, window.KIND, join.KIND, sliding.KIND, pattern.KIND, sql.KIND, python.KIND,
    changelog.KIND, lookup.KIND, materialized_view.KIND,
)}


def kind_of(spec: "AssetSpec") -> Kind:
    """The :class:`Kind` of ``spec``'s transform."""
    return KINDS[spec.transform.kind]


__all__ = ["KINDS", "Kind", "kind_of"]
