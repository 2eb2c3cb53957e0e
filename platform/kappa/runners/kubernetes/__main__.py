"""``python -m kappa.runners.kubernetes catalog ASSETS_DIR | example ASSETS_DIR ASSET [VERSION]``."""

from kappa.runners.kubernetes.catalog import main

raise SystemExit(main())
