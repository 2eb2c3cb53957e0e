"""Data quality: the gate a candidate version must pass before promotion (:mod:`~kappa.quality.gate`):
its Great Expectations suite, the quarantine rate, late rows and the shadow diff against the
promoted version. Below the runners (each runs the gate where its Spark runs) and above streaming."""
