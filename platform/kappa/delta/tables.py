"""Reads of Delta tables outside Spark: delta-rs (``deltalake``) reads the Delta log, pyarrow reads
the Parquet files it lists.

Why not ``deltalake.DeltaTable.to_pyarrow_dataset()``/``to_pyarrow_table()``: those read the files
through delta-rs's Python filesystem handler, and a process that read a table of several files that
way aborts at exit now and then ("terminate called without an active exception", exit status 134;
delta-io/delta-rs#2184, pola-rs/polars#24169). Measured here with deltalake 1.6.6 on the registry
(40 files): 10 of 40 processes aborted reading it through delta-rs, 0 of 40 through
:func:`dataset`. A table whose protocol needs what plain Parquet cannot express (deletion vectors,
column mapping) or that is partitioned is still read by delta-rs.
"""

from __future__ import annotations

from kappa.config import Settings

#: Reader features plain Parquet files cannot honour (Delta protocol, "Deletion Vectors", "Column Mapping").
_DELTA_ONLY = {"deletionVectors", "columnMapping"}


def open_table(table_path: str, settings: Settings | None = None, version: int | None = None):
    """``deltalake.DeltaTable`` of the table at ``table_path`` (Delta version ``version``, default the
    latest) with Kappa's delta-rs options (:func:`kappa.core.storage.delta_rs_options`: the object
    store's endpoint from ``settings``, ``s3a://`` as ``s3://``): THE way Kappa opens a table with
    delta-rs. Raises deltalake's ``TableNotFoundError`` when there is no table."""
    from deltalake import DeltaTable

    from kappa.core.storage import delta_rs_options, delta_rs_uri

    return DeltaTable(delta_rs_uri(table_path), version=version, storage_options=delta_rs_options(table_path, settings))


def is_table(table_path: str, settings: Settings | None = None) -> bool:
    """Whether a Delta table (a ``_delta_log`` with a commit) is at ``table_path`` (options as
    :func:`open_table`)."""
    from deltalake import DeltaTable

    from kappa.core.storage import delta_rs_options, delta_rs_uri

    return DeltaTable.is_deltatable(delta_rs_uri(table_path), delta_rs_options(table_path, settings))


def dataset(table_path: str, settings: Settings | None = None, version: int | None = None):
    """The Delta table at ``table_path`` (plain path, ``file://``, ``s3://`` or ``s3a://``; Delta
    version ``version``, default the latest) as a ``pyarrow.dataset.Dataset`` over its active
    Parquet files, with the table's schema, through ``pyarrow.fs`` (:func:`kappa.core.storage.filesystem`).
    Raises deltalake's ``TableNotFoundError`` when there is no table."""
    return _files_dataset(open_table(table_path, settings, version), settings)


def _files_dataset(table, settings: Settings | None = None):
    """:func:`dataset` of an open ``deltalake.DeltaTable`` (its log already read)."""
    import pyarrow as pa
    import pyarrow.dataset as pds

    from kappa.core.storage import filesystem, local_path

    if set(table.protocol().reader_features or []) & _DELTA_ONLY or table.metadata().partition_columns:
        return table.to_pyarrow_dataset()
    fs, _ = filesystem(table.table_uri, settings)  # one filesystem for every file
    # A file's path inside it: the local path, or the object store's "bucket/key".
    files = [str(p) if (p := local_path(f)) is not None else f.split("://", 1)[1] for f in table.file_uris()]
    return pds.dataset(files, schema=pa.schema(table.schema().to_arrow()), format="parquet", filesystem=fs)


def table_rows(table_path: str, settings: Settings | None, version: int | None = None) -> tuple[int, int | None]:
    """(rows, Delta version) of a table at Delta version ``version`` (default: the latest); (0,
    None) when it has no commit yet. Row counts come from the Parquet footers, no data is scanned."""
    try:
        table = open_table(table_path, settings, version)
    except Exception:  # TableNotFoundError: the query committed nothing yet
        return 0, None
    return _files_dataset(table, settings).count_rows(), table.version()


def count_of(table_path: str, asset: str, version: int, settings: Settings | None) -> int:
    """Rows of one asset version in a shared table (quarantine, late events); 0 when it does not exist."""
    import pyarrow.compute as pc

    try:
        ds = dataset(table_path, settings)
    except Exception:
        return 0
    return ds.count_rows(filter=(pc.field("asset") == asset) & (pc.field("version") == version))
