"""Kappa: a replay-first streaming data platform.

The Kafka log is the system of record; every table is a versioned Delta table derived from it by a
Structured Streaming query; reprocessing replays the log into a new version. The design, its
layers and where a new kind, service or check goes: ``docs/ARCHITECTURE.md`` in the repository.
"""

__version__ = "0.1.0"
