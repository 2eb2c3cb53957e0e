"""Change data capture: the operational PostgreSQL database, the Kafka Connect worker with Debezium,
and the changes applied to the database (``kappa postgres``, ``kappa connect``, ``kappa cdc``)."""

from kappa.errors import KappaError


class CdcError(KappaError, RuntimeError):
    """PostgreSQL or Kafka Connect cannot be started, stopped or reached, or a CDC declaration is
    wrong; the message says why and what to do."""
