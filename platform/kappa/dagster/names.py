"""Names and options shared by the Dagster modules; imports nothing of ``kappa``, so every module
of :mod:`kappa.dagster` can import it without a cycle."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import dagster as dg

#: Name of the non-blocking check the sensor evaluates on every asset.
HEALTH_CHECK = "query_health"
#: Name of the non-blocking check the sensor evaluates on every asset that declares ``freshness``.
FRESHNESS_CHECK = "freshness"
SENSOR_NAME = "kappa_streaming_queries"
REPLAY_JOB = "replay"
MAINTAIN_JOB = "maintain"
MAINTAIN_SCHEDULE = "kappa_maintain"
ADVANCE_JOB = "advance"
ADVANCE_SENSOR = "kappa_advance"
ARCHIVE_SENSOR = "kappa_archives"
PROMOTE_JOB = "promote_version"
ROLLBACK_JOB = "rollback"
FORGET_JOB = "forget_key"
ADD_ASSET_JOB = "add_asset"
EDIT_ASSET_JOB = "edit_asset"
RETIRE_ASSET_JOB = "retire_asset"
EVOLVE_ASSET_JOB = "evolve_asset"


class RunMode(str, Enum):
    """How a materialization runs an asset's query (``StreamingRunConfig.mode``):
    ``until_caught_up`` with Spark's available-now trigger, stopping once the query has read the
    log as it was at the start; ``continuous`` with the asset's processing-time trigger until the
    configured duration passes or the run is terminated."""

    until_caught_up = "until_caught_up"
    continuous = "continuous"


@dataclass(frozen=True)
class LoadOptions:
    """What the ``StreamingAssets`` component was configured with, handed to the builders (the
    sensor, the checks, the replay job, the ops) together with the loaded catalog.

    ``assets_path``: the resolved ``assets/`` folder; ``continuous``: assets that run long-running
    by default; ``stall_after_s``: seconds without a commit before a running query with records
    to read is unhealthy; ``sensor_interval_s``: seconds between sensor ticks; ``maintain_cron``:
    when the ``maintain`` schedule runs (cron, UTC); ``advance_interval_s``: seconds between the
    ``kappa_advance`` sensor's looks at the promoted tables."""

    assets_path: Path
    continuous: tuple[str, ...] = ()
    stall_after_s: float = 300.0
    sensor_interval_s: int = 30
    maintain_cron: str = "0 3 * * *"
    advance_interval_s: int = 60


def topic_key(topic: str) -> dg.AssetKey:
    """The external asset of a Kafka topic: ``topic/<name>``."""
    return dg.AssetKey(["topic", topic])
