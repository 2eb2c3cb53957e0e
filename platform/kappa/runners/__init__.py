"""Runners: where a streaming query runs (local Spark process or a SparkApplication on Kubernetes)."""
