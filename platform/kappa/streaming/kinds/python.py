"""``python``: a function ``transform(df) -> DataFrame`` over the upstream stream, named
``<module file>:<function>`` relative to the asset's YAML. This module is the whole kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import frame_sink


def load_transform(spec: AssetSpec):
    """The function ``transform.python`` names (``module.py:function``, beside the asset's YAML)."""
    assert spec.transform.python is not None and spec.path is not None
    module_file, _, func = spec.transform.python.partition(":")
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


KIND = Kind(name="python", start=start)
