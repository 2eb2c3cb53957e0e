"""Analysts' entry point: Spark SQL over promoted tables by their stable names.

Every asset with a promoted version is a temporary view named after the asset, reading that
version's Delta table; ``quarantine`` and ``late_events`` are views over those tables. A promotion or rollback
changes which table a name reads the next time views are registered (each ``kappa sql`` call).
"""

from __future__ import annotations

from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry, late_events_path, quarantine_path
from kappa.errors import KappaError


class QueryError(KappaError, RuntimeError):
    """Spark rejected the query; the message is Spark's own, without the JVM stack trace."""


def register_views(spark, settings: Settings) -> dict[str, str]:
    """Create or replace one view per promoted asset (and ``quarantine``); returns name -> path."""
    views: dict[str, str] = {}
    for asset, version in Registry(settings).promoted_all().items():
        spark.read.format("delta").load(version.table_path).createOrReplaceTempView(asset)
        views[asset] = version.table_path
    for name, path in (("quarantine", quarantine_path(settings)), ("late_events", late_events_path(settings))):
        if (Path(path) / "_delta_log").is_dir():
            spark.read.format("delta").load(str(path)).createOrReplaceTempView(name)
            views[name] = str(path)
    return views


def run_sql(spark, settings: Settings, query: str):
    """Run ``query`` with the stable-name views registered; returns a pandas DataFrame.

    Raises :class:`QueryError` with Spark's message for a bad query (unknown table or column,
    syntax error, …)."""
    from pyspark.errors import PySparkException

    register_views(spark, settings)
    try:
        return spark.sql(query).toPandas()
    except PySparkException as exc:
        message = getattr(exc, "getMessage", lambda: str(exc))()
        raise QueryError(str(message).split("\n\tat ")[0].strip()) from None
