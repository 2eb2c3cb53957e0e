"""``python``: a function ``transform(df) -> DataFrame`` over the upstream stream, named
``<module file>:<function>`` relative to the asset's YAML. This module is the whole kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from typing import Annotated

from kappa.spec import AssetSpec, TransformModel
from kappa.spec.base import CODE
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import frame_sink


class PythonTransform(TransformModel):
    """``python: module.py:function``: the function ``transform(df) -> DataFrame`` of a module
    beside the asset's YAML, over the upstream stream. Appends. Python code: the run-time policy
    refuses it (code review comes with the image)."""

    kind = "python"
    value_field = "python"
    row_expectations = True

    python: Annotated[str, CODE]

    def check_text(self, spec: AssetSpec) -> None:
        """``<file>.py:<function>`` with the file beside the YAML; a declaration recorded in the
        warehouse has no file, so it cannot hold python."""
        module, _, func = self.python.partition(":")
        if not func or spec.path is None or not (spec.path.parent / module).is_file():
            raise ValueError(
                f"transform.python: expected '<file>.py:<function>' next to the YAML, got {self.python!r}"
                + ("" if spec.path is not None else " (a python transform needs code review: add it as a file in assets/)"))

    def logic_text(self, spec: AssetSpec) -> str:
        """The module's text (a changed function is changed logic); ``""`` for a spec built in code."""
        if spec.path is None:
            return ""
        return (spec.path.parent / self.python.split(":")[0]).read_text()


def load_transform(spec: AssetSpec):
    """The function ``transform.python`` names (``module.py:function``, beside the asset's YAML)."""
    assert spec.path is not None
    module_file, _, func = PythonTransform.of(spec).python.partition(":")
    path = Path(spec.path).parent / module_file
    mod_spec = importlib.util.spec_from_file_location(f"kappa_asset_{spec.name}", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, func)


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``python`` query: the declared function over the upstream stream, into the asset's sink."""
    return frame_sink(spark, load_transform(spec)(source), spec, version, settings)


KIND = Kind(model=PythonTransform, start=start)
