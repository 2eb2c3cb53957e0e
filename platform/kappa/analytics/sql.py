"""Analysts' entry point: Spark SQL over promoted tables by their stable names.

Every asset with a promoted version is a temporary view named after the asset, reading that
version's Delta table at its pinned snapshot (``versionAsOf``: the cut, :mod:`kappa.lifecycle.cut`);
an asset with versions but none promoted is a view that fails with one line naming them and how to
promote one; ``quarantine`` and ``late_events`` are views over those tables (latest). A promotion,
rollback or ``kappa advance`` changes what a name reads the next time views are registered (each
``kappa sql`` call).
"""

from __future__ import annotations


from kappa.config import Settings
from kappa.core import storage
from kappa.delta.registry import Registry, late_events_path, quarantine_path
from kappa.errors import KappaError


class QueryError(KappaError, RuntimeError):
    """Spark rejected the query; the message is Spark's own, without the JVM stack trace."""


def register_views(spark, settings: Settings) -> dict[str, str]:
    """Create or replace one view per promoted asset at its pinned snapshot, one per unpromoted asset
    (failing with :func:`kappa.delta.registry.not_promoted_message` when read), and ``quarantine`` and
    ``late_events``; returns name -> path (``path@vN`` for a pinned snapshot)."""
    from kappa.delta.registry import not_promoted_sql

    views: dict[str, str] = {}
    registry = Registry(settings)
    for asset, version in registry.promoted_all().items():
        reader = spark.read.format("delta")
        if version.snapshot is not None:
            reader = reader.option("versionAsOf", version.snapshot)
        reader.load(version.table_path).createOrReplaceTempView(asset)
        views[asset] = version.table_path + ("" if version.snapshot is None else f"@v{version.snapshot}")
    for asset, message in registry.unpromoted().items():
        spark.sql(not_promoted_sql(message)).createOrReplaceTempView(asset)
    for name, path in (("quarantine", quarantine_path(settings)), ("late_events", late_events_path(settings))):
        if storage.exists(storage.join(str(path), "_delta_log"), settings):  # a local folder or an object store
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
        raise QueryError(user_message(str(message).split("\n\tat ")[0].strip())) from None


def user_message(message: str) -> str:
    """Spark's message without the ``[USER_RAISED_EXCEPTION]`` / ``SQLSTATE`` wrapping of a
    ``raise_error`` (the unpromoted-name views' one line); other messages unchanged."""
    prefix = "[USER_RAISED_EXCEPTION] "
    if not message.startswith(prefix):
        return message
    return message[len(prefix):].split(" SQLSTATE:")[0].strip()
