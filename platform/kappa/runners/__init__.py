"""Runners: where a streaming query runs, a local Spark process or a SparkApplication on Kubernetes.

* :mod:`kappa.runners.base` — the :class:`~kappa.runners.base.Runner` protocol, :class:`RunError`
  and the one catch-up loop above any runner;
* :mod:`kappa.runners.local` and :mod:`kappa.runners.kubernetes` — the two implementations;
* :mod:`kappa.runners.versions` — what every runner needs first: the source topics and the version
  each asset runs;
* this package — :func:`runner_class`, the only branch on ``settings.runner``, :func:`pick_runner` and
  :func:`run_until_caught_up`, what ``kappa run``, ``kappa demo`` and Dagster call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kappa.runners.base import AssetRunResult, Runner, RunError, catch_up

if TYPE_CHECKING:
    from kappa.config import Settings
    from kappa.delta.registry import Registry, Version
    from kappa.spec import Catalog


def runner_class(settings: "Settings") -> type:
    """The runner class ``settings.runner`` names: :class:`~kappa.runners.local.LocalRunner` or
    :class:`~kappa.runners.kubernetes.runner.KubernetesRunner`. The ONLY place that branches on the
    runner: what differs by where queries run is asked of the class (``from_settings``, ``identity``,
    ``refuses_source_topics``), never by comparing ``settings.runner``."""
    if settings.runner == "kubernetes":
        from kappa.runners.kubernetes.runner import KubernetesRunner

        return KubernetesRunner
    from kappa.runners.local import LocalRunner

    return LocalRunner


def pick_runner(settings: "Settings", **options) -> Runner:
    """The runner ``settings.runner`` names (:func:`runner_class`): a
    :class:`~kappa.runners.local.LocalRunner` (``options``: ``spark``, ``on_progress``) or a
    :class:`~kappa.runners.kubernetes.runner.KubernetesRunner` (``options``: ``config``, ``api``,
    ``poll_s``, ``start_timeout_s``; the configuration defaults to ``KAPPA_K8S_*``)."""
    return runner_class(settings).from_settings(settings, **options)


def run_until_caught_up(
    settings: Settings,
    names: list[str] | None = None,
    *,
    spark=None,
    versions: dict[str, Version] | None = None,
    on_progress: Callable[[str, dict], None] | None = None,
    runner=None,
    timeout_s: float | None = None,
    registry: Registry | None = None,
    catalog: Catalog | None = None,
) -> list[AssetRunResult]:
    """Run ``names`` (default: every asset) until each has caught up with the log as it is now,
    upstream levels before downstream levels (:func:`kappa.runners.base.catch_up`), on ``runner``
    (default: :func:`pick_runner` with ``spark``).

    ``versions`` overrides which version of an asset runs (replay passes the new versions).
    ``registry``: the command's snapshot (default: a new one, ``kappa run``'s), which every event
    the run records goes through. ``catalog``: the command's catalog (default: loaded here).
    Raises :class:`~kappa.runners.base.RunError` if a query fails, :class:`~kappa.runners.versions.LogicChangedError` if a declaration changed.
    """
    from kappa.delta.registry import Registry
    from kappa.runners.versions import ensure_source_topics, resolve_versions
    from kappa.delta.declarations import as_recorded, catalog as catalog_of

    catalog = catalog or catalog_of(settings)
    names = catalog.topological(names or list(catalog.assets))
    ensure_source_topics(settings, catalog, names)
    registry = registry or Registry(settings)
    chosen = dict(versions or {})
    missing = [n for n in names if n not in chosen]
    if missing:
        chosen.update(resolve_versions(catalog, missing, registry))
    # Each version runs the declaration it recorded, never the file as it is now.
    catalog = as_recorded(settings, catalog, {n: chosen[n] for n in names})
    if runner is None:
        runner = pick_runner(settings, spark=spark)
    try:
        return catch_up(runner, settings, catalog, names, chosen, registry=registry, on_progress=on_progress,
                        timeout_s=timeout_s)
    finally:
        if not runner.detached:
            for name in names:  # bounded queries have ended; this only tidies the handles
                runner.stop(name, chosen[name].version)


__all__ = ["RunError", "Runner", "pick_runner", "run_until_caught_up", "runner_class"]
