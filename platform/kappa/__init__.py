"""Kappa: a replay-first streaming data platform.

The Kafka log is the system of record; every table is a versioned Delta table derived from it by a
Structured Streaming query; reprocessing replays the log into a new version. See ARCHITECTURE.md.
"""

__version__ = "0.1.0"
