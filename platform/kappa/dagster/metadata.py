"""Dagster metadata built from the library's results (a run's result, a gate report, a query's
health). Imports nothing of ``kappa``: it reads the objects it is given by their attributes."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import dagster as dg


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


class ProgressLog:
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
        """Every distinct progress seen for ``asset`` (Spark's ``StreamingQueryProgress`` as a dict:
        ``batchId``, ``numInputRows``, ``durationMs``, …), one per micro-batch, by batch id."""
        return [p for (a, _), p in sorted(self.seen.items()) if a == asset]


def _iso(ts: float | None) -> str:
    return "never" if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def health_metadata(h) -> dict[str, object]:
    """Metadata of a :class:`kappa.streaming.checkpoint.QueryHealth` (sensor observation, ``query_health``)."""
    md: dict[str, object] = {
        "version": h.version,
        "state": h.state,
        "healthy": h.healthy,
        "last_progress_at": _iso(h.last_progress_at),
        "seconds_since_progress": dg.MetadataValue.float(round(h.seconds_since_progress or 0.0, 1))
        if h.last_progress_at else dg.MetadataValue.null(),
        "committed_batch": dg.MetadataValue.int(h.committed_batch) if h.committed_batch is not None
        else dg.MetadataValue.null(),
    }
    if h.lag or h.end_offsets:
        md["consumer_lag"] = h.total_lag
        md["consumer_lag_by_partition"] = dg.MetadataValue.json(h.lag)
        md["committed_offsets"] = dg.MetadataValue.json(h.committed)
        md["log_end_offsets"] = dg.MetadataValue.json(h.end_offsets)
    if h.upstream_versions_behind is not None:
        md["upstream_delta_versions_behind"] = h.upstream_versions_behind
    if h.application is not None:
        md["application"] = h.application
        md["application_state"] = h.application_state or "NEW"
    return md


def data_docs_url(location: str | Path) -> dg.MetadataValue:
    """A link to a gate's GX Data Docs ``index.html``: a local path as a ``file://`` URL, an
    object-store URI (``s3a://``) as it is."""
    text = str(location)
    return dg.MetadataValue.url(text if "://" in text else Path(text).resolve().as_uri())


def check_metadata(check, report) -> dict[str, object]:
    """Metadata of one gate check (a :class:`kappa.quality.gate.CheckResult` of ``report``, a
    :class:`~kappa.quality.gate.GateReport`): version, observed, expected, blocking, each
    ``details`` entry as ``details/<key>``, the GX Data Docs as a URL and a path when built, and
    the whole shadow-diff summary on the ``shadow_diff`` check."""
    md: dict[str, object] = {
        "version": report.version,
        "observed": meta_value(check.observed),
        "expected": str(check.expected),
        "blocking": bool(check.blocking),
    }
    for k, v in (check.details or {}).items():
        md[f"details/{k}"] = meta_value(v)
    if report.data_docs_path:
        md["data_docs"] = data_docs_url(report.data_docs_path)
        md["data_docs_path"] = dg.MetadataValue.path(report.data_docs_path)
    if check.name == "shadow_diff" and report.shadow_diff is not None:
        md["shadow_diff"] = meta_value(report.shadow_diff)
    return md


def check_description(check, report) -> str:
    """One line for the Dagster UI: ``<asset>/v<N> <check> passed|FAILED|NOT EVALUATED: observed …,
    expected …``. A check not evaluated did not pass: Dagster has no outcome for "nothing to
    measure", so its result is ``passed=False`` (WARN when it does not block) and this line says
    why."""
    verdict = "passed" if check.passed else ("FAILED" if getattr(check, "evaluated", True) else "NOT EVALUATED")
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
