"""Local real parts started and stopped on this machine, all of one shape
(:class:`~kappa.core.service.LocalService`).

* :mod:`kappa.core.service` — the shape (low in the layers: every part declares itself with it);
* :mod:`kappa.services.serve` — the SQL endpoint (Spark Thrift Server);
* :mod:`kappa.services.cluster` — the Kubernetes control plane for tests (no containers);
* :mod:`kappa.services.objectstore` — the S3-compatible object store (versitygw, no containers);
* :mod:`kappa.services.spark_cluster` — a Spark standalone cluster (a master and workers from pyspark);

The broker lives with :mod:`kappa.kafka` and PostgreSQL and Connect with :mod:`kappa.cdc`, beside
the code that uses them; :func:`services` lists all seven. How a part's process is spawned,
watched and stopped is :mod:`kappa.core.processes`, below them all.
"""

from __future__ import annotations

from kappa.core.service import LocalService


def services() -> list[LocalService]:
    """Every local part, in start order (object store, broker, PostgreSQL, Connect, Spark cluster,
    SQL endpoint, control plane): the object store first, since tables and checkpoints may live in it."""
    from kappa.cdc import connect, postgres
    from kappa.kafka import broker
    from kappa.services import cluster, objectstore, serve, spark_cluster

    return [objectstore.SERVICE, broker.SERVICE, postgres.SERVICE, connect.SERVICE, spark_cluster.SERVICE,
            serve.SERVICE, cluster.SERVICE]


__all__ = ["LocalService", "services"]
