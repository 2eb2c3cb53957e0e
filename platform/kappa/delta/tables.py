"""Small reads of Delta tables through delta-rs (no Spark): row counts from Parquet footers."""

from __future__ import annotations


def table_rows(table_path: str) -> tuple[int, int | None]:
    """(rows, Delta version) of a table through delta-rs; (0, None) when it has no commit yet.
    Row counts come from the Parquet footers, no data is scanned."""
    from deltalake import DeltaTable

    try:
        table = DeltaTable(table_path)
    except Exception:  # TableNotFoundError: the query committed nothing yet
        return 0, None
    return table.to_pyarrow_dataset().count_rows(), table.version()


def count_of(table_path: str, asset: str, version: int) -> int:
    """Rows of one asset version in a shared table (quarantine, late events); 0 when it does not exist."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    try:
        ds = DeltaTable(table_path).to_pyarrow_dataset()
    except Exception:
        return 0
    return ds.count_rows(filter=(pc.field("asset") == asset) & (pc.field("version") == version))
