"""The harness: ``kappa bench`` and ``kappa chaos`` and what they share with the tests, apart from
the product modules.

* :mod:`kappa.harness.env` — an isolated environment (own assets copy, broker on free ports,
  warehouse, checkpoints) and :func:`~kappa.harness.env.free_port`;
* :mod:`kappa.harness.delta_log` — Delta commit history and columns read without Spark;
* :mod:`kappa.harness.truth` — ground truth computed by DuckDB, not Spark, and the comparisons;
* :mod:`kappa.harness.chaos`, :mod:`kappa.harness.bench` — what the two commands run (the commands
  themselves are :mod:`kappa.cli.chaos` and :mod:`kappa.cli.bench`).

Nothing in the product imports this package except the CLI, which mounts the two commands.
"""
