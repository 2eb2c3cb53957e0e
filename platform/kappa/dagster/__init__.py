"""Kappa's Dagster front end: the only package that imports ``dagster``.

* :mod:`kappa.dagster.definitions` — the code location's entry point (``[tool.dagster]`` in
  ``pyproject.toml``): loads ``assets/`` through the component and applies the run policy.
* :mod:`kappa.dagster.component` — ``StreamingAssets``, one Dagster asset per asset YAML, with its
  lineage, blocking gate checks and ``query_health`` check.
* :mod:`kappa.dagster.execution` — what materializing a streaming asset does.
* :mod:`kappa.dagster.sensor` — lag and health of running queries (the reading of checkpoints is
  the library's, :mod:`kappa.streaming.checkpoint`, which ``kappa status`` uses too).
* :mod:`kappa.dagster.names` / :mod:`kappa.dagster.metadata` — shared names and metadata builders;
  they import nothing of ``kappa``. The builders receive the loaded catalog and the component's
  :class:`~kappa.dagster.names.LoadOptions`, never the component.
* :mod:`kappa.dagster.replay` — the ``replay`` job.
* :mod:`kappa.dagster.maintain` — the ``maintain`` job and its ``kappa_maintain`` schedule.
* :mod:`kappa.dagster.advance` — the ``advance`` job and its ``kappa_advance`` sensor.
* :mod:`kappa.dagster.promote` — the ``promote_version`` and ``rollback`` jobs (``kappa promote``,
  ``kappa rollback``).
* :mod:`kappa.dagster.forget` — the ``forget_key`` job (``kappa forget``).
* :mod:`kappa.dagster.resources` — ``KappaResource`` (settings, SparkSession).
* :mod:`kappa.dagster.failure` — ``as_failure``: every op's one way from a library error
  (:class:`~kappa.errors.KappaError`) to a failed step (``dagster.Failure``).

Spark and Delta code never imports this package; it calls the library, like the CLI does.
"""
