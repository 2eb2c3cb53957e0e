"""The Structured Streaming side of Kappa: what runs inside the Spark process of an asset version.

* :mod:`~kappa.streaming.query` starts one version's query: source, kind, checkpoint, trigger;
* :mod:`~kappa.streaming.sources` its input (Kafka topics less forgotten keys, or an upstream
  version's Delta table); :mod:`~kappa.streaming.session` the one SparkSession and Spark conf;
* :mod:`~kappa.streaming.kinds` the transform kinds, one module each (its model, frame and
  writer), over :mod:`~kappa.streaming.records` (Kafka records, the side tables' schemas) and, for
  ``pattern``, the Spark-free matcher :mod:`~kappa.streaming.cep`;
* :mod:`~kappa.streaming.writers` the one ``foreachBatch`` writer base (transactional Delta writes);
* :mod:`~kappa.streaming.policy` and :mod:`~kappa.streaming.sql_policy` what a declaration added
  at run time may hold;
* :mod:`~kappa.streaming.checkpoint` what a checkpoint says, read from outside the query's process.

Exactly-once comes from the checkpoint plus idempotent sinks (Spark's Structured Streaming guide,
"Fault Tolerance Semantics"); replay is a new version with its own checkpoint and table (DDIA
ch. 11, "Reprocessing data for application evolution").
"""
