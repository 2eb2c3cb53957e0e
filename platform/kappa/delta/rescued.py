"""The rescued-fields table (``<warehouse>/_kappa/rescued``, :func:`kappa.streaming.records.rescued_schema`),
read without Spark: the one reader of what silver kept of its records' undeclared fields (and of
values not of their declared type), for the gate's ``schema_drift`` check and ``kappa declarations
evolve``."""

from __future__ import annotations

import json

from kappa.config import Settings
from kappa.delta.registry import rescued_path


def rescued_fields(settings: Settings, asset: str, version: int, samples: int = 1_000) -> dict[str, dict]:
    """name -> ``{"records": n, "values": up to ``samples`` values, "sample": the first}`` of the
    fields ``asset`` version ``version`` rescued, read with delta-rs (no Spark); empty when none."""
    import pyarrow.compute as pc

    from kappa.delta.tables import dataset, is_table

    path = rescued_path(settings)
    if not is_table(path, settings):
        return {}
    rows = (dataset(path, settings).to_table(
        columns=["fields", "offset"], filter=(pc.field("asset") == asset) & (pc.field("version") == version))
        .sort_by("offset").column("fields").to_pylist())
    out: dict[str, dict] = {}
    for text in rows:
        for name, value in json.loads(text).items():
            f = out.setdefault(name, {"records": 0, "values": []})
            f["records"] += 1
            if len(f["values"]) < samples and value is not None:
                f["values"].append(value)
    for f in out.values():
        f["sample"] = f["values"][0] if f["values"] else None
    return out


def rescued_coordinates(settings: Settings, asset: str, version: int, limit: int = 1_000) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of the first ``limit`` records (by partition and offset) whose
    fields ``asset`` version ``version`` rescued: where to read them back from the log."""
    from kappa.delta.tables import dataset, is_table

    import pyarrow.compute as pc

    path = rescued_path(settings)
    if not is_table(path, settings):
        return []
    rows = (dataset(path, settings).to_table(
        columns=["topic", "partition", "offset"], filter=(pc.field("asset") == asset) & (pc.field("version") == version))
        .sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]).slice(0, limit))
    return list(zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(),
                    rows.column("offset").to_pylist()))
