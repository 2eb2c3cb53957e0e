"""The driver program of one asset version on the ``kubernetes`` runner (the image's
``/opt/kappa/bin/entrypoint.py`` runs this module), also usable locally:

    python -m kappa.runners.entrypoint --asset flights --version 2 [--upstream flights=2]

It builds the same query as the local runner from the same asset YAML, with a processing-time
trigger, and runs it until SIGTERM (the operator's stop) or a failure (non-zero exit, so the
SparkApplication fails and is restarted by its restart policy). Paths come from the environment the
runner sets (``KAPPA_TABLE_PATH``, ``KAPPA_CHECKPOINT_PATH``), else from the settings' roots; Kafka
security options from ``KAPPA_KAFKA_*`` (see :class:`kappa.config.Settings`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from datetime import datetime, timezone

from kappa.config import load_settings
from kappa.delta.registry import Version, checkpoint_path, table_path
from kappa.spec import load_catalog


def version_from_environment(settings, spec, version: int, upstream: dict[str, int]) -> Version:
    """The :class:`Version` to run, without the registry: paths from ``KAPPA_TABLE_PATH`` /
    ``KAPPA_CHECKPOINT_PATH`` or the settings' roots, a writer id derived from asset and version
    (stable across driver restarts, so idempotent writes survive them)."""
    return Version(
        asset=spec.name, version=version,
        table_path=os.environ.get("KAPPA_TABLE_PATH") or str(table_path(settings, spec.name, version)),
        checkpoint_path=os.environ.get("KAPPA_CHECKPOINT_PATH") or str(checkpoint_path(settings, spec.name, version)),
        txn_app_id=f"kappa-{spec.name}-v{version}", fingerprint=spec.fingerprint(), upstream=upstream,
        created_at=datetime.now(timezone.utc),
        upstream_paths={name: str(table_path(settings, name, v)) for name, v in upstream.items()},
    )


def argument_parser() -> argparse.ArgumentParser:
    """The entrypoint's arguments, as the SparkApplication's ``spec.arguments`` passes them."""
    parser = argparse.ArgumentParser(prog="kappa-entrypoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--asset", required=True)
    parser.add_argument("--version", required=True, type=int)
    parser.add_argument("--upstream", action="append", default=[], metavar="ASSET=VERSION",
                        help="the upstream version an asset-sourced asset reads")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)

    from kappa.streaming.query import start_query

    settings = load_settings()
    spec = load_catalog(settings.assets_dir)[args.asset]
    upstream = dict(item.split("=", 1) for item in args.upstream)
    missing = [u for u in spec.upstream if u not in upstream]
    if missing:
        parser.error(f"{spec.name} reads {missing}: pass --upstream NAME=VERSION")
    version = version_from_environment(settings, spec, args.version, {k: int(v) for k, v in upstream.items()})

    if settings.runner == "kubernetes":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()  # spark-submit already carries the conf
    else:
        from kappa.streaming.session import spark_session

        spark = spark_session(settings)

    running = start_query(spark, spec, version, settings, "continuous")
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()
        running.query.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    running.query.awaitTermination()
    if not stopping.is_set():
        print(f"{version.name} stopped without being asked to: {running.query.exception()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
