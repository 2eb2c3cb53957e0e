"""A version's life above the runners: replay into a new version, gate, promote and roll back
(:mod:`~kappa.lifecycle.promotion`), and forget a key everywhere (:mod:`~kappa.lifecycle.forget`).
One path whatever the runner: everything here works through :class:`~kappa.runners.base.Runner`."""
