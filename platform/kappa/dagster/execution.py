"""What a streaming asset's op does: run the asset's current version, record metadata, run the gate.

Metadata of a materialization (units in the names): ``version``, ``delta_table_version``,
``dagster/row_count`` (rows in the version's table), ``rows_written`` (rows added by this run; an
upsert that only updates rows adds none), ``input_rows`` (records read), ``source_offsets``
(Kafka: topic -> partition -> end offset read), ``batch_ms`` (each non-empty micro-batch's
``triggerExecution`` duration, ms), ``input_rows_per_s`` and ``processed_rows_per_s`` (Spark's
``StreamingQueryProgress`` definitions), ``quarantined``, ``dropped_by_watermark``, paths.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import dagster as dg

from kappa.dagster.observe import read_checkpoint
from kappa.delta.registry import Registry
from kappa.runners.local import kafka_offsets, records_read
from kappa.spec import SpecError

if TYPE_CHECKING:
    from kappa.dagster.component import StreamingAssets, StreamingRunConfig
    from kappa.dagster.resources import KappaResource


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message is the whole story: shown as the run's failure, without a traceback."""
    from kappa.delta.registry import RegistryError
    from kappa.jvm import JvmError
    from kappa.kafka.topics import TopicError
    from kappa.runners.local import RunError

    return (SpecError, RunError, RegistryError, TopicError, JvmError)


def meta_value(value: object) -> dg.MetadataValue:
    """Any observed value as Dagster metadata (numbers stay numbers, structures become JSON)."""
    if value is None:
        return dg.MetadataValue.null()
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, str):
        return dg.MetadataValue.text(value)
    try:
        return dg.MetadataValue.json(json.loads(json.dumps(value, default=str)))
    except (TypeError, ValueError):
        return dg.MetadataValue.text(repr(value))


def _table_rows(table_path: str) -> tuple[int, int | None]:
    """(rows, Delta table version) of a table through delta-rs; (0, None) if it does not exist yet.
    Row counts come from the Parquet footers, no data is scanned."""
    from deltalake import DeltaTable

    if not (Path(table_path) / "_delta_log").is_dir():
        return 0, None
    table = DeltaTable(table_path)
    return table.to_pyarrow_dataset().count_rows(), table.version()


def result_metadata(result, version, rows_before: int | None = None) -> dict[str, object]:
    """Materialization metadata from a :class:`kappa.runners.local.AssetRunResult`."""
    md: dict[str, object] = {
        "version": result.version,
        "version_name": f"{result.asset}/v{result.version}",
        "delta_table_version": meta_value(result.delta_version),
        "dagster/row_count": result.rows,
        "input_rows": result.input_rows,
        "quarantined": result.quarantined,
        "dropped_by_watermark": result.dropped_by_watermark,
        "batches": result.batches,
        "batch_ms": dg.MetadataValue.json(list(result.batch_ms)),
        "batch_ms_max": max(result.batch_ms, default=0),
        "input_rows_per_s": float(result.input_rows_per_s),
        "processed_rows_per_s": float(result.processed_rows_per_s),
        "seconds": float(result.seconds),
        "source_offsets": dg.MetadataValue.json(result.end_offsets or {}),
    }
    if rows_before is not None:
        md["rows_written"] = max(0, result.rows - rows_before)
    if version is not None:
        md["table_path"] = dg.MetadataValue.path(version.table_path)
        md["checkpoint_path"] = dg.MetadataValue.path(version.checkpoint_path)
        if version.upstream:
            md["upstream_versions"] = dg.MetadataValue.json(version.upstream)
    return md


class _ProgressLog:
    """``on_progress`` callback: logs each new micro-batch once and keeps every progress seen."""

    def __init__(self, context, every_s: float = 10.0):
        self.context, self.every_s = context, every_s
        self.seen: dict[tuple[str, int], dict] = {}
        self._last_log = 0.0

    def __call__(self, asset: str, p: dict) -> None:
        key = (asset, int(p.get("batchId", -1)))
        if key in self.seen:
            return
        self.seen[key] = p
        now = time.monotonic()
        if now - self._last_log >= self.every_s:
            self._last_log = now
            self.context.log.info(
                f"{asset}: batch {p.get('batchId')} read {p.get('numInputRows', 0)} rows "
                f"({p.get('inputRowsPerSecond', 0):.0f} in/s, {p.get('processedRowsPerSecond', 0):.0f} processed/s)"
            )

    def batches(self, asset: str) -> list[dict]:
        return [p for (a, _), p in sorted(self.seen.items()) if a == asset]


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


def _run_long(component: "StreamingAssets", name: str, context, settings, kappa, duration_s: float | None):
    """Run ``name`` with its processing-time trigger until ``duration_s`` passes or the run is
    terminated; log an observation with the query's rates every ``sensor_interval_s``."""
    from kappa.runners.local import run_continuous

    key = dg.AssetKey(name)
    stop = threading.Event()  # run_continuous stops between micro-batches once this is set
    timer = threading.Timer(duration_s, stop.set) if duration_s else None
    log = _ProgressLog(context)
    last_obs = [time.monotonic()]

    def on_progress(asset: str, p: dict) -> None:
        log(asset, p)
        if time.monotonic() - last_obs[0] >= component.sensor_interval_s:
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
        run_continuous(settings, [name], stop=stop, spark=kappa.spark(settings), on_progress=on_progress)
    finally:
        if timer is not None:
            timer.cancel()
    version = Registry(settings).latest(name)
    assert version is not None
    rows, delta_version = _table_rows(version.table_path)
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
    component: "StreamingAssets", name: str, context: dg.AssetExecutionContext,
    config: "StreamingRunConfig", kappa: "KappaResource",
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Body of a streaming asset's op (see module doc). Raises :class:`dagster.Failure` with the
    library's message for expected errors (a failed query, a changed declaration, …)."""
    from kappa.dagster.component import RunMode

    key = dg.AssetKey(name)
    settings = kappa.settings(assets_dir=str(component.assets_path))
    spark = None
    if settings.runner == "kubernetes":
        from kappa.dagster import kubernetes

        try:
            yield from kubernetes.materialize(component, name, context, kappa, settings)
        except _expected_errors() as exc:
            raise dg.Failure(description=str(exc), metadata={"asset": name}) from exc
        return
    try:
        if key in context.selected_asset_keys:
            mode = config.mode or (RunMode.continuous if name in component.continuous else RunMode.until_caught_up)
            context.log.info(f"running {name} ({mode.value})")
            if mode == RunMode.until_caught_up:
                from kappa.runners.local import run_until_caught_up

                spark = kappa.spark(settings)
                current = Registry(settings).latest(name)
                rows_before = _table_rows(current.table_path)[0] if current else 0
                [result] = run_until_caught_up(settings, [name], spark=spark, on_progress=_ProgressLog(context))
                version = Registry(settings).version(name, result.version)
                metadata = {**result_metadata(result, version, rows_before), "mode": mode.value}
            else:
                version, metadata = _run_long(component, name, context, settings, kappa, config.duration_s)
            yield dg.MaterializeResult(
                asset_key=key, metadata=metadata,
                data_version=dg.DataVersion(f"v{version.version}.{metadata['delta_table_version'].value}"),
            )
        else:
            version = Registry(settings).latest(name)
            if version is None:
                raise dg.Failure(description=f"{name} has no version yet: materialize it before running its checks")
        wanted = [ck.name for ck in context.selected_asset_check_keys if ck.asset_key == key]
        if wanted and not (Path(version.table_path) / "_delta_log").is_dir():
            # A long-running query stopped before its first micro-batch committed: nothing to check,
            # and saying so beats a Spark "path does not exist" error.
            for check in wanted:
                yield dg.AssetCheckResult(
                    asset_key=key, check_name=check, passed=False,
                    description=f"{version.name} has no table yet: its query committed no micro-batch",
                    metadata={"version": version.version},
                )
        elif wanted:
            from kappa.quality import run_gate

            report = run_gate(settings, name, version.version, spark=spark or kappa.spark(settings))
            yield from gate_check_results(key, report, wanted)
    except _expected_errors() as exc:
        raise dg.Failure(description=str(exc), metadata={"asset": name}) from exc


def check_metadata(check, report) -> dict[str, object]:
    md: dict[str, object] = {
        "version": report.version,
        "observed": meta_value(check.observed),
        "expected": str(check.expected),
        "blocking": bool(check.blocking),
    }
    for k, v in (check.details or {}).items():
        md[f"details/{k}"] = meta_value(v)
    if report.data_docs_path:
        md["data_docs"] = dg.MetadataValue.url(Path(report.data_docs_path).resolve().as_uri())
        md["data_docs_path"] = dg.MetadataValue.path(report.data_docs_path)
    if check.name == "shadow_diff" and report.shadow_diff is not None:
        md["shadow_diff"] = meta_value(report.shadow_diff)
    return md


def check_description(check, report) -> str:
    verdict = "passed" if check.passed else "FAILED"
    return (f"{report.asset}/v{report.version} {check.name} {verdict}: observed {check.observed!r}, "
            f"expected {check.expected}")


def gate_check_results(key: dg.AssetKey, report, names: list[str]) -> Iterator[dg.AssetCheckResult]:
    """One result per declared check. A declared check the gate did not evaluate fails (silence
    must not read as success). A non-blocking result is reported with WARN severity, which Dagster
    does not treat as blocking even though every gate check is declared ``blocking=True``."""
    by_name = {c.name: c for c in report.checks}
    for name in names:
        c = by_name.get(name)
        if c is None:
            yield dg.AssetCheckResult(
                asset_key=key, check_name=name, passed=False,
                description=f"{report.asset}/v{report.version}: the gate did not evaluate {name}",
                metadata={"version": report.version},
            )
            continue
        yield dg.AssetCheckResult(
            asset_key=key, check_name=name, passed=bool(c.passed),
            severity=dg.AssetCheckSeverity.ERROR if c.blocking else dg.AssetCheckSeverity.WARN,
            description=check_description(c, report), metadata=check_metadata(c, report),
        )
