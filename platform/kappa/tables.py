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

A stable name reads its promoted version's **pinned snapshot** (the Delta version chosen with the
cut when it was promoted or last advanced, :mod:`kappa.lifecycle.cut`), not the latest commit, so
``flights`` and ``departures_hourly`` read through ``kappa.tables`` agree with each other and with
``kappa serve``. ``version=`` reads another Delta version of the same table (time travel).

The resolution happens once, when called: a promotion, rollback or ``kappa advance`` afterwards is
seen by the next ``open``. The registry records which version a stable name points at
(:class:`kappa.delta.registry.Registry`); Delta versions a table's own commits on top of that.
"""

from __future__ import annotations

from kappa.config import Settings, load_settings
from kappa.delta.registry import Registry, RegistryError

__all__ = ["open", "dataset", "path", "snapshot", "names"]


def resolve(name: str, settings: Settings | None = None) -> tuple[str, int | None]:
    """(Delta table path, pinned snapshot) of stable name ``name``: its promoted version's table
    (``<warehouse>/<asset>/v<N>``) and the Delta version pinned by the cut (None: never pinned,
    the latest), or a dbt mart (``<warehouse>/_dbt/<model>``, latest). Raises
    :class:`RegistryError` in one line: for an asset without a promoted version, naming its versions
    and how to promote one; else naming the promoted names."""
    from kappa.core import storage
    from kappa.delta.registry import not_promoted_message
    from kappa.services.serve import marts_root

    settings = settings or load_settings()
    registry = Registry(settings)
    events = registry.events()
    version = registry.promoted(name, events)
    if version is not None:
        return version.table_path, version.snapshot
    mart = storage.join(marts_root(settings), name)
    if storage.exists(storage.join(mart, "_delta_log"), settings):  # a local folder or an object store
        return mart, None
    versions = registry.versions(name, events)
    if versions:
        raise RegistryError(not_promoted_message(name, versions))
    known = ", ".join(sorted(registry.promoted_all())) or "none yet"
    raise RegistryError(f"no promoted table or dbt mart named {name!r} (promoted: {known})")


def path(name: str, settings: Settings | None = None) -> str:
    """The Delta table path of stable name ``name`` (:func:`resolve`). Raises :class:`RegistryError`."""
    return resolve(name, settings)[0]


def snapshot(name: str, settings: Settings | None = None) -> int | None:
    """The Delta version stable name ``name`` reads (:func:`resolve`; None: the latest). Raises
    :class:`RegistryError`."""
    return resolve(name, settings)[1]


def open(name: str, settings: Settings | None = None, version: int | None = None):  # noqa: A001
    """``deltalake.DeltaTable`` of stable name ``name`` at its pinned snapshot (:func:`resolve`;
    a dbt mart at its latest); ``version`` reads another Delta version of the same table (time
    travel). Settings default to the ``KAPPA_*`` environment. Raises :class:`RegistryError` for an
    unknown or unpromoted name."""
    from kappa.delta.tables import open_table

    settings = settings or load_settings()
    location, pinned = resolve(name, settings)
    return open_table(str(location), settings, pinned if version is None else version)


def dataset(name: str, settings: Settings | None = None, version: int | None = None):
    """``pyarrow.dataset.Dataset`` of stable name ``name`` at its pinned snapshot (:func:`resolve`),
    or at Delta version ``version`` of the same table: its active Parquet files with the table's
    schema (:func:`kappa.delta.tables.dataset`). Raises :class:`RegistryError` for an unknown or
    unpromoted name."""
    from kappa.delta.tables import dataset as table_dataset

    settings = settings or load_settings()
    location, pinned = resolve(name, settings)
    return table_dataset(location, settings, version=pinned if version is None else version)


def names(settings: Settings | None = None) -> list[str]:
    """Every stable name with a promoted version."""
    return sorted(Registry(settings or load_settings()).promoted_all())
