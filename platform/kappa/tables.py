"""Promoted tables for readers outside Spark: a stable name resolved to its promoted version's
Delta table through delta-rs (the ``deltalake`` package), for pandas, pyarrow, DuckDB or Polars.

Example::

    import duckdb
    import kappa.tables

    flights = kappa.tables.dataset("flights")          # pyarrow dataset of the promoted version
    df = flights.to_table(columns=["carrier", "dep_delay"]).to_pandas()
    with duckdb.connect() as con:                      # DuckDB scans it lazily, filters pushed down
        con.sql("SELECT carrier, avg(dep_delay) FROM flights GROUP BY carrier").show()
    kappa.tables.open("flights").history()             # deltalake.DeltaTable: the log, time travel

Read the data through :func:`dataset` (pyarrow's own filesystems) rather than
``open(...).to_pyarrow_dataset()``/``to_pandas()``: a process that read a table through delta-rs's
file handler aborts at exit now and then (see :mod:`kappa.delta.tables`).

The resolution happens once, when called: a promotion or rollback afterwards is seen by the next
``open``. The registry records which version a stable name points at
(:class:`kappa.delta.registry.Registry`); Delta versions a table's own commits on top of that.
"""

from __future__ import annotations

from kappa.config import Settings, load_settings
from kappa.delta.registry import Registry, RegistryError

__all__ = ["open", "dataset", "path", "names"]


def path(name: str, settings: Settings | None = None) -> str:
    """The Delta table path of ``name``'s promoted version (``<warehouse>/<asset>/v<N>``), or of a
    dbt mart (``<warehouse>/_dbt/<model>``). Raises :class:`RegistryError` when neither exists."""
    from pathlib import Path

    from kappa.services.serve import marts_root

    settings = settings or load_settings()
    version = Registry(settings).promoted(name)
    if version is not None:
        return version.table_path
    mart = Path(marts_root(settings)) / name
    if (mart / "_delta_log").is_dir():
        return str(mart)
    known = ", ".join(names(settings)) or "none yet"
    raise RegistryError(f"no promoted table or dbt mart named {name!r} (promoted: {known})")


def open(name: str, settings: Settings | None = None, version: int | None = None):  # noqa: A001
    """``deltalake.DeltaTable`` of the promoted version of stable name ``name`` (or of a dbt
    mart); ``version`` pins a Delta table version (time travel) within it. Settings default to
    the ``KAPPA_*`` environment. Raises :class:`RegistryError` for an unknown name."""
    from deltalake import DeltaTable

    settings = settings or load_settings()
    from kappa.core.storage import delta_rs_options, delta_rs_uri

    settings = settings or load_settings()
    location = path(name, settings)
    return DeltaTable(delta_rs_uri(location), version=version, storage_options=delta_rs_options(location, settings))


def dataset(name: str, settings: Settings | None = None, version: int | None = None):
    """``pyarrow.dataset.Dataset`` of the promoted version of stable name ``name`` (or of a dbt
    mart), Delta version ``version`` (default: the latest) of it: its active Parquet files with the
    table's schema (:func:`kappa.delta.tables.dataset`). Raises :class:`RegistryError` for an
    unknown name."""
    from kappa.delta.tables import dataset as table_dataset

    settings = settings or load_settings()
    return table_dataset(path(name, settings), settings, version=version)


def names(settings: Settings | None = None) -> list[str]:
    """Every stable name with a promoted version."""
    return sorted(Registry(settings or load_settings()).promoted_all())
