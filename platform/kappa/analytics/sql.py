"""Analysts' entry point: Spark SQL over what the SQL endpoint serves, in this process (``kappa sql``).

What a query sees is what ``kappa serve`` serves, registered by the same function
(:func:`kappa.services.serve.process.sync_catalog` over :func:`kappa.services.serve.process.served_relations`): every
asset with a promoted version is a view named after the asset reading that version's Delta table at
its pinned snapshot (the cut, :mod:`kappa.lifecycle.cut`); an asset with versions but none promoted
is a view that fails with one line naming them and how to promote one; ``quarantine`` and
``late_events`` are views over those tables (latest); the dbt marts are tables in schema
``analytics`` (``analytics.carrier_daily_performance``). A promotion, rollback or ``kappa advance``
changes what a name reads the next time the catalog is synced (each ``kappa sql`` call).
"""

from __future__ import annotations

import weakref

from kappa.config import Settings
from kappa.errors import KappaError


class QueryError(KappaError, RuntimeError):
    """Spark rejected the query; the message is Spark's own, without the JVM stack trace."""


#: Spark session -> what :func:`kappa.services.serve.process.sync_catalog` registered in its catalog last, so
#: a session that runs many queries (the demo, the tests' shared one) syncs only what changed.
_applied: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def sync_session(spark, settings: Settings) -> dict[str, str]:
    """Make ``spark``'s catalog serve what the endpoint serves (the stable names, ``quarantine``,
    ``late_events`` and the dbt marts in ``analytics``); returns name -> a view's SQL or a table's
    Delta path (:func:`kappa.services.serve.process.sync_catalog`)."""
    from kappa.services.serve.process import sync_catalog

    _applied[spark] = sync_catalog(spark, settings, _applied.get(spark, {}), marts=True)
    return _applied[spark]


def run_sql(spark, settings: Settings, query: str):
    """Run ``query`` over what the endpoint serves (:func:`sync_session`); returns a pandas DataFrame.

    Raises :class:`QueryError` with Spark's message for a bad query (unknown table or column,
    syntax error, …)."""
    from pyspark.errors import PySparkException

    sync_session(spark, settings)
    try:
        return spark.sql(query).toPandas()
    except PySparkException as exc:
        message = exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
        raise QueryError(user_message(str(message).split("\n\tat ")[0].strip())) from None


def user_message(message: str) -> str:
    """Spark's message without the ``[USER_RAISED_EXCEPTION]`` / ``SQLSTATE`` wrapping of a
    ``raise_error`` (the unpromoted-name views' one line); other messages unchanged."""
    prefix = "[USER_RAISED_EXCEPTION] "
    if not message.startswith(prefix):
        return message
    return message[len(prefix):].split(" SQLSTATE:")[0].strip()
