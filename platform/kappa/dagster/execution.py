"""What a streaming asset's op does: run the asset's current version, record metadata, run the gate.

Metadata of a materialization (units in the names): ``version``, ``delta_table_version``,
``dagster/row_count`` (rows in the version's table), ``rows_written`` (rows added by this run; an
upsert that only updates rows adds none), ``input_rows`` (records read), ``source_offsets``
(Kafka: topic -> partition -> end offset read), ``batch_ms`` (each non-empty micro-batch's
``triggerExecution`` duration, ms), ``input_rows_per_s`` and ``processed_rows_per_s`` (Spark's
``StreamingQueryProgress`` definitions), ``quarantined``, ``dropped_by_watermark``, paths.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Iterator

import dagster as dg
from pydantic import Field

from kappa.streaming.checkpoint import read_checkpoint
from kappa.dagster.failure import as_failure
from kappa.dagster.metadata import ProgressLog, gate_check_results, meta_value, result_metadata
from kappa.dagster.names import LoadOptions, RunMode
from kappa.delta.registry import Registry
from kappa.delta.tables import table_rows
from kappa.runners.local import kafka_offsets, records_read

if TYPE_CHECKING:
    from kappa.dagster.resources import KappaResource
    from kappa.spec import Catalog


class StreamingRunConfig(dg.Config):
    """Run configuration of one streaming asset (every field optional, so a plain "Materialize"
    works)."""

    mode: RunMode | None = Field(
        None, description="until_caught_up: available-now trigger, stop when caught up. continuous: the "
        "asset's processing-time trigger, until duration_s passes or the run is terminated. "
        "Default: the component's per-asset setting (`continuous:`), else until_caught_up.",
    )
    duration_s: float | None = Field(
        None, gt=0, description="continuous mode only: stop after this many seconds (default: run until "
        "the run is terminated).",
    )


def table_exists(table_path: str, settings) -> bool:
    """Whether a Delta table has its first commit (any filesystem, :mod:`kappa.core.storage`)."""
    from kappa.core.storage import exists, join

    return exists(join(table_path, "_delta_log"), settings)


def _progress_metadata(progress: list[dict], log_start: dict | None = None) -> dict[str, object]:
    """Metadata of a long-running run from its micro-batch progress reports (``log_start``: the
    version's recorded start offsets, see :func:`kappa.runners.local.records_read`)."""
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    batch_ms = [int(p.get("durationMs", {}).get("triggerExecution", 0)) for p in batches]
    offsets = kafka_offsets(progress)
    last = progress[-1] if progress else {}
    return {
        "input_rows": records_read(progress, log_start),
        "batches": len(batches),
        "batch_ms": dg.MetadataValue.json(batch_ms),
        "batch_ms_max": max(batch_ms, default=0),
        "input_rows_per_s": float(last.get("inputRowsPerSecond", 0.0) or 0.0),
        "processed_rows_per_s": float(last.get("processedRowsPerSecond", 0.0) or 0.0),
        "source_offsets": dg.MetadataValue.json(offsets),
    }


def _run_long(options: LoadOptions, name: str, context, settings, kappa, duration_s: float | None,
              registry: Registry):
    """Run ``name`` with its processing-time trigger until ``duration_s`` passes or the run is
    terminated; log an observation with the query's rates every ``sensor_interval_s``. Records and
    reads through ``registry``, the run's snapshot."""
    from kappa.runners.local import run_continuous

    key = dg.AssetKey(name)
    stop = threading.Event()  # run_continuous stops between micro-batches once this is set
    timer = threading.Timer(duration_s, stop.set) if duration_s else None
    log = ProgressLog(context)
    last_obs = [time.monotonic()]

    def on_progress(asset: str, p: dict) -> None:
        log(asset, p)
        if time.monotonic() - last_obs[0] >= options.sensor_interval_s:
            last_obs[0] = time.monotonic()
            context.log_event(dg.AssetObservation(asset_key=key, metadata={
                "mode": "continuous", "batch_id": int(p.get("batchId", -1)),
                "input_rows_per_s": float(p.get("inputRowsPerSecond", 0.0) or 0.0),
                "processed_rows_per_s": float(p.get("processedRowsPerSecond", 0.0) or 0.0),
                "last_progress_at": str(p.get("timestamp")),
            }))

    started = time.monotonic()
    if timer is not None:
        timer.start()
    try:
        run_continuous(settings, [name], stop=stop, spark=kappa.spark(settings), on_progress=on_progress,
                       registry=registry)
    finally:
        if timer is not None:
            timer.cancel()
    version = registry.latest(name)
    assert version is not None
    rows, delta_version = table_rows(version.table_path, settings)
    # The checkpoint, not the sampled progress reports, says where the query stopped: a batch
    # can start and commit between two samples.
    committed = read_checkpoint(version.checkpoint_path).offsets
    md = {
        "version": version.version,
        "version_name": version.name,
        "mode": "continuous",
        "delta_table_version": meta_value(delta_version),
        "dagster/row_count": rows,
        "seconds": round(time.monotonic() - started, 2),
        "table_path": dg.MetadataValue.path(version.table_path),
        "checkpoint_path": dg.MetadataValue.path(version.checkpoint_path),
        **_progress_metadata(log.batches(name), (version.last("created") or {}).get("start_offsets")),
    }
    if committed and all(isinstance(v, dict) for v in committed.values()):
        md["source_offsets"] = dg.MetadataValue.json(committed)
    return version, md


def materialize(
    catalog: "Catalog", options: LoadOptions, name: str, context: dg.AssetExecutionContext,
    config: "StreamingRunConfig", kappa: "KappaResource",
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Body of a streaming asset's op (see module doc), whatever the runner. Raises
    :class:`dagster.Failure` with the library's message for expected errors (a failed query, a
    changed declaration, …)."""
    from kappa.quality.gate import recorded_gate

    key = dg.AssetKey(name)
    settings = kappa.settings(assets_dir=str(options.assets_path))
    with as_failure(asset=name):
        registry = Registry(settings)  # the run's one snapshot of the registry, passed down
        runner = kappa.build_runner(settings)
        detached = runner.detached
        wanted = [ck.name for ck in context.selected_asset_check_keys if ck.asset_key == key]
        gated = False  # a fresh gate runs after a run in this process, not after a detached start
        if key in context.selected_asset_keys:
            default = RunMode.continuous if name in options.continuous or detached else RunMode.until_caught_up
            mode = config.mode or default
            context.log.info(f"running {name} ({mode.value}) on the {runner.kind} runner")
            if mode == RunMode.until_caught_up:
                from kappa.runners import run_until_caught_up

                current = registry.latest(name)
                rows_before = table_rows(current.table_path, settings)[0] if current else 0
                [result] = run_until_caught_up(settings, [name], runner=runner, on_progress=ProgressLog(context),
                                               timeout_s=kappa.catch_up_timeout_s, registry=registry, catalog=catalog)
                version = registry.version(name, result.version)
                metadata = {**result_metadata(result, version, rows_before), "mode": mode.value,
                            "runner": runner.kind}
                gated = True
            elif detached:
                from kappa.dagster import kubernetes

                yield from kubernetes.start_detached(runner, catalog, name, context, settings, registry)
                version = registry.latest(name)
                metadata = None
            else:
                version, metadata = _run_long(options, name, context, settings, kappa, config.duration_s, registry)
                gated = True
            if metadata is not None:
                yield dg.MaterializeResult(
                    asset_key=key, metadata=metadata,
                    data_version=dg.DataVersion(f"v{version.version}.{metadata['delta_table_version'].value}"),
                )
        else:
            version = registry.latest(name)
            if version is None:
                raise dg.Failure(description=f"{name} has no version yet: materialize it before running its checks")
            gated = not detached
        if not wanted:
            return
        if gated and not table_exists(version.table_path, settings):
            # A long-running query stopped before its first micro-batch committed: nothing to check,
            # and saying so beats a Spark "path does not exist" error.
            for check in wanted:
                yield dg.AssetCheckResult(
                    asset_key=key, check_name=check, passed=False,
                    description=f"{version.name} has no table yet: its query committed no micro-batch",
                    metadata={"version": version.version},
                )
        elif gated:
            yield from gate_check_results(key, runner.gate(name, version.version, registry, catalog), wanted)
        elif (report := recorded_gate(version)) is not None:
            context.log.info(f"{name}: reporting the gate recorded for {version.name}")
            yield from gate_check_results(key, report, wanted)
        else:
            from kappa.dagster.kubernetes import GATE_NOT_EVALUATED

            # No result for a selected check: Dagster shows it as skipped, and the materialization's
            # `gate` metadata (kubernetes.gate_note) says why.
            context.log.warning(f"{name}: gate checks {wanted} {GATE_NOT_EVALUATED}; they are reported as skipped")


