"""The driver program of one asset version on the ``kubernetes`` runner (the image's
``/opt/kappa/bin/entrypoint.py`` runs this module), also usable locally:

    python -m kappa.runners.entrypoint --asset flights --version 2 [--upstream flights=2]

It reads the version's record from the registry (table path, checkpoint path, ``txnAppId``,
upstream versions: made once by :func:`kappa.delta.registry.new_version_details`, never re-derived
here), checks it against what the SparkApplication says (``--upstream``, ``KAPPA_TABLE_PATH``,
``KAPPA_CHECKPOINT_PATH``, ``KAPPA_TXN_APP_ID``; a mismatch exits 2), builds the same query as the
local runner from the same asset YAML with its processing-time trigger, and runs it until SIGTERM
(the operator's stop) or a failure (non-zero exit, so the SparkApplication fails and is restarted by
its restart policy). While it runs it names the rows its stateful operators drop behind the
watermark, as the local runner does (:func:`watch`), and records them in the registry. Kafka security comes from ``KAPPA_KAFKA_*`` (see :class:`kappa.config.Settings`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable

from kappa.config import load_settings
from kappa.delta.registry import Registry, Version
from kappa.delta.declarations import catalog as catalog_of, recorded_spec

if TYPE_CHECKING:
    from kappa.spec import AssetSpec
    from kappa.streaming.late import LateTally

#: Seconds between two looks at the query's progress reports (Spark keeps the last 100:
#: ``spark.sql.streaming.numRecentProgressUpdates``; a trigger interval of 1 s leaves 100 s).
POLL_S = 5.0


def argument_parser() -> argparse.ArgumentParser:
    """The entrypoint's arguments, as the SparkApplication's ``spec.arguments`` passes them."""
    parser = argparse.ArgumentParser(prog="kappa-entrypoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--asset", required=True)
    parser.add_argument("--version", required=True, type=int)
    parser.add_argument("--upstream", action="append", default=[], metavar="ASSET=VERSION",
                        help="the upstream version an asset-sourced asset reads")
    return parser


def mismatches(version: Version, upstream: dict[str, int], environ: dict[str, str]) -> list[str]:
    """What the application says that the registry's record of ``version`` does not."""
    out = []
    if upstream != {k: int(v) for k, v in version.upstream.items()}:
        out.append(f"--upstream {upstream} but the registry pins {version.upstream}")
    for name, recorded in (("KAPPA_TABLE_PATH", version.table_path), ("KAPPA_CHECKPOINT_PATH", version.checkpoint_path),
                           ("KAPPA_TXN_APP_ID", version.txn_app_id)):
        given = environ.get(name)
        if given and given != recorded:
            out.append(f"{name}={given} but the registry records {recorded}")
    return out


def version_and_spec(settings, asset: str, version: int,
                     registry: Registry | None = None) -> tuple[Version, "AssetSpec"]:
    """The registry's record of ``asset`` version ``version`` (in ``registry``, the driver's
    snapshot; default: a new one) and the spec its query is built from: the declaration the
    version recorded (a file's text, or one added at run time and kept only in the warehouse),
    never the image's file as it is now. Raises :class:`~kappa.delta.registry.RegistryError` for
    an unknown version."""
    record = (registry or Registry(settings)).version(asset, version)
    return record, recorded_spec(settings, record, catalog_of(settings).assets.get(asset))


def watch(query, tally: "LateTally", record: Callable[[dict], None], poll_s: float = POLL_S) -> None:
    """Wait for ``query`` (a ``StreamingQuery``) to terminate; every ``poll_s`` seconds, and once
    after it ends, fold its progress reports into ``tally`` (naming the late rows of each new batch
    whose stateful operators dropped rows, as the local runner does) and ``record`` the drops not
    reported yet (:meth:`~kappa.streaming.late.LateTally.unreported`: the details of a ``dropped``
    registry event), so the gate's ``late_rows`` check and ``kappa status`` count them on Kubernetes
    too. Raises what ``awaitTermination`` raises for a failed query (after a last fold)."""
    from kappa.runners.local import progress_as_dict

    def fold() -> None:
        tally.fold([progress_as_dict(p) for p in query.recentProgress if p])
        drops = tally.unreported()
        if drops is not None:
            record(drops)

    try:
        while not query.awaitTermination(poll_s):
            fold()
    finally:
        fold()


def main(argv: list[str] | None = None) -> int:
    """Run the version's query (module docstring) until it stops; returns the exit status: 0 when
    stopped by SIGTERM or SIGINT, 1 when the query ended without being asked to. A query that
    fails raises Spark's ``StreamingQueryException`` out of ``awaitTermination`` (the process
    fails); a mismatch with the registry exits 2 (``argparse``'s ``SystemExit``); a declaration
    recorded at run time that breaks the policy (:func:`kappa.streaming.policy.check_before_running`)
    exits 3 with one line naming the declaration, the field and the rule; an unknown asset
    or version raises :class:`~kappa.spec.SpecError` or
    :class:`~kappa.delta.registry.RegistryError`."""
    parser = argument_parser()
    args = parser.parse_args(argv)

    from kappa.streaming.late import LateTally
    from kappa.streaming.policy import PolicyError
    from kappa.streaming.query import start_query
    from kappa.streaming.session import spark_session

    settings = load_settings()
    registry = Registry(settings)  # the driver's one snapshot: read once here, then only appended to
    upstream = {k: int(v) for k, v in (item.split("=", 1) for item in args.upstream)}
    version, spec = version_and_spec(settings, args.asset, args.version, registry)
    wrong = mismatches(version, upstream, dict(os.environ))
    if wrong:
        parser.error(f"{version.name}: " + "; ".join(wrong))

    spark = spark_session(settings)  # under spark-submit: the submission's configuration
    try:
        running = start_query(spark, spec, version, settings, "continuous")
    except PolicyError as exc:  # a declaration recorded at run time that breaks the policy
        print(f"{version.name} not started: {exc}", file=sys.stderr)
        return 3
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()
        running.query.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watch(running.query, LateTally(spark, settings, spec, version),
          lambda drops: registry.record(spec.name, version.version, "dropped", **drops))
    if not stopping.is_set():
        print(f"{version.name} stopped without being asked to: {running.query.exception()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
