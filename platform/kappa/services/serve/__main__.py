"""``python -m kappa.services.serve --host H --port P``: the endpoint's own process (the command
:func:`kappa.services.serve.start` spawns and the chart's Deployment runs)."""

from kappa.services.serve.process import main

main()
