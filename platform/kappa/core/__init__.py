"""What every layer stands on: filesystems and object stores (:mod:`~kappa.core.storage`), the
Maven-resolved jars (:mod:`~kappa.core.jvm`), local processes (:mod:`~kappa.core.processes`) and
the shape of a local service (:mod:`~kappa.core.service`). Imports nothing above
:mod:`kappa.config` and :mod:`kappa.errors`."""
