"""The kinds registry: each transform kind is one module, which declares its model (a
:class:`~kappa.spec.asset.TransformModel` subclass naming its ``kind``: the declaration's
fields, their policy roles and the facts the declaration layer asks), its query (frame and writer)
and ``KIND``, a :class:`~kappa.streaming.kinds.base.Kind` (what the gate, forget, the runners,
promotion and Dagster must know of it).

The built-in kinds are the modules of this package, imported here (adding a module adds a kind;
nothing lists them). A kind declared in any other module is one too once that module is imported
(its model registers itself). Only a kind's own module knows its name and fields; everything else
asks :func:`kind_of`. :mod:`~kappa.streaming.kinds.sliding` is a whole kind in one module.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from kappa.spec.asset import transform_kinds
from kappa.streaming.kinds.base import Kind

if TYPE_CHECKING:
    from kappa.spec import AssetSpec

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def kind_of(spec: "AssetSpec") -> Kind:
    """The :class:`Kind` of ``spec``'s transform: the ``KIND`` of the module that declares its model."""
    return _kind_of_model(type(spec.transform.model))


def _kind_of_model(model: type) -> Kind:
    kind = getattr(importlib.import_module(model.__module__), "KIND", None)
    assert isinstance(kind, Kind) and kind.model is model, f"{model.__module__} declares no KIND for {model.__name__}"
    return kind


def kinds() -> dict[str, Kind]:
    """Every registered kind by name (:func:`kappa.spec.asset.transform_kinds`), built-in first."""
    return {name: _kind_of_model(model) for name, model in transform_kinds().items()}


__all__ = ["Kind", "kind_of", "kinds"]
