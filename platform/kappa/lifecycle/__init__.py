"""A version's life above the runners: replay into a new version, gate, promote and roll back
(:mod:`~kappa.lifecycle.promotion`), forget a key everywhere (:mod:`~kappa.lifecycle.forget`), and
compact, checkpoint and vacuum the tables off the queries' hot path (:mod:`~kappa.lifecycle.maintain`).
One path whatever the runner: everything here works through :class:`~kappa.runners.base.Runner`."""
