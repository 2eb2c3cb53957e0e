"""``python -m kappa.cli``: the ``kappa`` command (the image's driver entry point runs it so)."""

from kappa.cli.app import app

app()
