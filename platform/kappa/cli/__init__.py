"""The ``kappa`` command, one front end over the library (Dagster is the other).

* :mod:`kappa.cli.app` — the Typer application (``kappa = "kappa.cli.app:app"``) and its commands;
* :mod:`kappa.cli.services` — ``kappa <service> start|stop|status`` built from one factory over
  every :class:`~kappa.core.service.LocalService`;
* :mod:`kappa.cli.demo` — ``kappa demo``, the main job;

How a command reports an expected error (one line, exit status 1) is :mod:`kappa.core.guard`,
shared with the harness's commands. ``python -m kappa.cli`` runs the command too (:mod:`kappa.cli.__main__`).
"""
