"""Kappa's own Delta tables, and reading Delta tables outside Spark.

* :mod:`~kappa.delta.registry` — the version registry (an append-only event log): each asset's
  versions, their paths and ``txnAppId``, and which one a stable name resolves to;
* :mod:`~kappa.delta.forgotten` — the forgotten list of ``kappa forget`` (key hashes, never keys),
  low in the layers so every query can drop forgotten records as it reads;
* :mod:`~kappa.delta.tables` — reads without Spark: delta-rs reads the Delta log, pyarrow the
  Parquet files it lists (the registry, the Dagster code location, :mod:`kappa.tables`).
"""
