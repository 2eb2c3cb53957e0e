"""Observing the streaming queries: the ``kappa_streaming_queries`` sensor and ``query_health`` checks.

Every tick, for the latest version of every asset, the sensor reports an ``AssetObservation``
(consumer lag per partition, committed and log end offsets, time of last progress, input rate
between ticks) and a ``query_health`` check evaluation. A failed or stalled query fails the check,
so it shows red in the UI rather than going quiet. Each source topic gets an observation of its log
end offsets too (per partition, and their total). The logic is in :mod:`kappa.streaming.checkpoint`.
"""


import json
import time
from typing import TYPE_CHECKING

import dagster as dg

from kappa.dagster.metadata import health_metadata
from kappa.dagster.names import HEALTH_CHECK, SENSOR_NAME, LoadOptions, topic_key
from kappa.dagster.resources import KappaResource
from kappa.streaming.checkpoint import QueryHealth, observe

if TYPE_CHECKING:
    from kappa.spec import AssetSpec, Catalog


def health_evaluation(h: QueryHealth, blocking: bool = False) -> dg.AssetCheckEvaluation:
    """The ``query_health`` check evaluation of one observation, as the sensor reports it: passed
    when ``h.healthy``, severity ``h.severity`` (``ERROR``, or ``WARN`` for an application not yet
    running), ``h.reason`` as the description, :func:`~kappa.dagster.metadata.health_metadata`."""
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(h.asset), check_name=HEALTH_CHECK, passed=h.healthy,
        severity=dg.AssetCheckSeverity(h.severity), description=h.reason, metadata=health_metadata(h),
        blocking=blocking,
    )


def _observe(settings, catalog: "Catalog", options: LoadOptions, kappa: KappaResource, names: list[str] | None = None):
    """Checkpoints and log end offsets, whatever the runner; queries that outlive the process (a
    detached runner: Kubernetes) also by their applications' states."""
    runner = kappa.build_runner(settings)
    if runner.detached:
        from kappa.dagster import kubernetes

        return kubernetes.observe(settings, catalog, runner, names, options.stall_after_s)
    return observe(settings, catalog, options.stall_after_s, names=names)


def build_health_checks(catalog: "Catalog", options: LoadOptions, specs: list["AssetSpec"]) -> list[dg.AssetChecksDefinition]:
    """A ``query_health`` check per asset: evaluated on demand here, and by the sensor every tick."""
    def build(name: str) -> dg.AssetChecksDefinition:
        @dg.asset_check(
            asset=dg.AssetKey(name), name=HEALTH_CHECK, blocking=False,
            description="The latest version's query is not failed and not stalled (a running query with "
                        "records to read and no commit for stall_after_s); reports consumer lag.",
        )
        def _health(context: dg.AssetCheckExecutionContext, kappa: KappaResource) -> dg.AssetCheckResult:
            settings = kappa.settings(assets_dir=str(options.assets_path))
            found = _observe(settings, catalog, options, kappa, names=[name])
            if not found:
                return dg.AssetCheckResult(passed=False, description=f"{name} has no version yet")
            h = found[0]
            return dg.AssetCheckResult(passed=h.healthy, description=h.reason, metadata=health_metadata(h),
                                       severity=dg.AssetCheckSeverity(h.severity))

        return _health

    checks = [build(spec.name) for spec in specs]
    return checks


def running_sensor(name: str, interval_s: int, description: str):
    """``@dg.sensor`` that is on from the start (``DefaultSensorStatus.RUNNING``), evaluated at most
    every ``interval_s`` seconds: Kappa's sensors observe, they never launch runs, so no one has to
    turn them on."""
    return dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
                     description=description)


def build_sensor(catalog: "Catalog", options: LoadOptions) -> dg.SensorDefinition:
    """The ``kappa_streaming_queries`` sensor (running by default, a tick every
    ``options.sensor_interval_s`` seconds). Each tick observes the latest version of every asset
    in ``catalog`` and reports, per asset, an ``AssetObservation`` (health metadata, plus
    ``input_rows_per_s``: records committed per second since the previous tick, from the cursor)
    and a :func:`health_evaluation`; per source topic, an observation of its log end offsets. It
    requests no runs. A broker that does not answer shows as unhealthy assets, not as a failed tick
    (:func:`kappa.streaming.checkpoint.observe`)."""
    @running_sensor(SENSOR_NAME, options.sensor_interval_s,
                    "Observes every streaming asset's latest version: consumer lag per partition "
                    "(log end offset - checkpoint's committed offset), last progress, input rate; "
                    "fails query_health for a failed or stalled query.")
    def _sensor(context: dg.SensorEvaluationContext, kappa: KappaResource) -> dg.SensorResult:
        settings = kappa.settings(assets_dir=str(options.assets_path))
        now = time.time()
        previous = json.loads(context.cursor) if context.cursor else {}
        cursor: dict[str, dict] = {}
        events: list = []
        topics_seen: dict[str, dict] = {}
        for h in _observe(settings, catalog, options, kappa):
            md = health_metadata(h)
            consumed = sum(int(v) for parts in h.committed.values() if isinstance(parts, dict)
                           for v in parts.values())
            cursor[h.asset] = {"version": h.version, "consumed": consumed, "t": now}
            prev = previous.get(h.asset)
            if prev and prev.get("version") == h.version and now > prev["t"] and h.end_offsets:
                # Records committed per second between two ticks (the query's throughput as seen
                # from its checkpoint; Spark's own rates are logged by the run itself).
                md["input_rows_per_s"] = round((consumed - prev["consumed"]) / (now - prev["t"]), 1)
            events.append(dg.AssetObservation(asset_key=dg.AssetKey(h.asset), metadata=md,
                                              description=h.reason))
            events.append(health_evaluation(h))
            for topic, ends in h.end_offsets.items():
                topics_seen[topic] = ends
        for topic, ends in topics_seen.items():
            events.append(dg.AssetObservation(asset_key=topic_key(topic), metadata={
                "log_end_offsets": dg.MetadataValue.json(ends),
                "log_end_offset_total": sum(ends.values()),
            }))
        unhealthy = [e.asset_key.to_user_string() for e in events
                     if isinstance(e, dg.AssetCheckEvaluation) and not e.passed]
        if unhealthy:
            context.log.warning(f"unhealthy streaming queries: {', '.join(unhealthy)}")
        return dg.SensorResult(asset_events=events, cursor=json.dumps(cursor))

    return _sensor
