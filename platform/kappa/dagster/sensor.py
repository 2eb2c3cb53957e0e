"""Observing the streaming queries: the ``kappa_streaming_queries`` sensor and ``query_health`` checks.

Every tick, for the latest version of every asset, the sensor reports an ``AssetObservation``
(consumer lag per partition, committed and log end offsets, time of last progress, input rate
between ticks) and a ``query_health`` check evaluation. A failed or stalled query fails the check,
so it shows red in the UI rather than going quiet. Each source topic gets an observation of its log
end offsets too (per partition, and their total). The logic is in :mod:`kappa.streaming.checkpoint`.

Every asset that declares ``freshness`` gets a ``freshness`` check evaluation each tick
(:func:`kappa.quality.freshness.evaluate`), and the tick raises alerts
(:func:`kappa.quality.freshness.raise_alert`: the alerts table and the webhook) when an asset's
freshness breaks or recovers and when a query stops (its version failed) or runs again.
"""


import json
import time
from typing import TYPE_CHECKING

import dagster as dg

from kappa.dagster.metadata import health_metadata
from kappa.dagster.names import FRESHNESS_CHECK, HEALTH_CHECK, SENSOR_NAME, LoadOptions, topic_key
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


def freshness_evaluation(f) -> dg.AssetCheckEvaluation:
    """The ``freshness`` check evaluation of a :class:`kappa.quality.freshness.Freshness`: passed
    when fresh; not evaluated shows as a non-passing WARN whose description says NOT EVALUATED;
    a breach as a failed ERROR naming each bound exceeded."""
    md = {"lag_records": f.lag_records, "lag_seconds": f.lag_seconds, "max_lag_records": f.max_lag_records,
          "max_lag_seconds": f.max_lag_seconds, "version": f.version}
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(f.asset), check_name=FRESHNESS_CHECK, passed=bool(f.fresh),
        severity=dg.AssetCheckSeverity.WARN if f.fresh is None else dg.AssetCheckSeverity.ERROR,
        description=f.describe(), metadata={k: v for k, v in md.items() if v is not None},
    )


def alert_on(settings, h: QueryHealth, f, states: dict | None = None) -> list[str]:
    """Raise (or resolve) the alerts of one observation: ``query_stopped`` while ``h``'s version
    has failed, ``freshness`` while ``f`` (a :class:`kappa.quality.freshness.Freshness`, or None)
    is stale; ``states`` as :func:`kappa.quality.freshness.raise_alert` takes it. Returns the
    one-line messages of the alerts raised now (state changes only)."""
    from kappa.quality.freshness import Alert, raise_alert

    raised = []
    stopped = h.state == "failed"
    alert = Alert("query_stopped", h.asset, h.version, "firing" if stopped else "resolved",
                  f"{h.asset} v{h.version}: " + (f"its query stopped: {h.reason}" if stopped else "its query runs again"))
    if raise_alert(settings, alert, states):
        raised.append(alert.message)
    if f is not None and f.fresh is not None:
        alert = Alert("freshness", f.asset, f.version, "resolved" if f.fresh else "firing",
                      f"{f.asset} v{f.version}: " + ("fresh again" if f.fresh else f.reason),
                      {"lag_records": f.lag_records, "lag_seconds": f.lag_seconds, "behind": f.behind})
        if raise_alert(settings, alert, states):
            raised.append(alert.message)
    return raised


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

    def build_freshness(spec: "AssetSpec") -> dg.AssetChecksDefinition:
        @dg.asset_check(
            asset=dg.AssetKey(spec.name), name=FRESHNESS_CHECK, blocking=False,
            description="The asset is within its declared freshness: records behind the log end (through "
                        "its upstreams) and the age of the oldest record it has not read.",
        )
        def _freshness(context: dg.AssetCheckExecutionContext, kappa: KappaResource) -> dg.AssetCheckResult:
            from kappa.quality.freshness import evaluate

            e = freshness_evaluation(evaluate(kappa.settings(assets_dir=str(options.assets_path)), spec.name))
            return dg.AssetCheckResult(passed=e.passed, description=e.description, metadata=e.metadata,
                                       severity=e.severity)

        return _freshness

    checks = [build(spec.name) for spec in specs]
    checks += [build_freshness(spec) for spec in specs if spec.freshness is not None]
    return checks


def running_sensor(name: str, interval_s: int, description: str):
    """``@dg.sensor`` that is on from the start (``DefaultSensorStatus.RUNNING``), evaluated at most
    every ``interval_s`` seconds: Kappa's sensors observe, they never launch runs, so no one has to
    turn them on."""
    return dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
                     description=description)


def freshness_of(settings, catalog: "Catalog", asset: str):
    """:func:`kappa.quality.freshness.evaluate` of ``asset`` when it declares freshness, else None."""
    spec = catalog.assets.get(asset)  # an asset declared after the location loaded has no such check
    if spec is None or spec.freshness is None:
        return None
    from kappa.quality.freshness import evaluate

    return evaluate(settings, asset, catalog=catalog)


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
        from kappa.quality.freshness import alert_states

        states = alert_states(settings)  # read once a tick
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
            fresh = freshness_of(settings, catalog, h.asset)
            if fresh is not None:
                events.append(freshness_evaluation(fresh))
            for message in alert_on(settings, h, fresh, states):
                context.log.warning(f"alert: {message}")
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
