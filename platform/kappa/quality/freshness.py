"""Freshness: how far an asset is behind the log, against what it declares, and the alerts raised
when it falls behind or its query stops.

An asset declares ``freshness: {max_lag_records: N, max_lag_seconds: S}`` (either or both) in its
YAML. :func:`evaluate` measures the version the asset's stable name follows (the promoted one;
the newest when none is promoted) against the log as it is now:

* **records behind** (``lag_records``): over every topic partition the version reads, directly or
  through its upstream assets, the log end offset minus the offset its newest micro-batch covers
  (:func:`kappa.streaming.provenance.batch_watermarks`: a gold table is behind by the records its
  silver rows have not come from yet);
* **seconds behind** (``lag_seconds``): event time behind the log end — over the partitions it
  has not read to the end, the latest event time of their last records minus the earliest event
  time of their first records not covered (two records per partition read back,
  :func:`kappa.kafka.topics.records_at`); 0 when it has read to the log end. A record's event time
  is the field the ``parse`` asset reading its topic declares
  (:meth:`kappa.spec.catalog.Catalog.event_time_field`); for a topic no such asset reads (a
  changelog), or when one of those records' event time cannot be read (a bad record), every
  record's broker timestamp instead, so one clock is compared with itself (Kafka's
  ``LogAppendTime``: every Kappa topic is stamped by the broker,
  :meth:`kappa.spec.catalog.TopicSpec.kafka_config`), the time lag of kafka-lag-exporter and
  Burrow measured to the log end instead of to now. Event time, so a replay of old events is
  judged by how much of their history it lacks, not by the wall clock.

A version that has not committed a micro-batch, or whose newest batch does not record what it read,
is **not evaluated** (``fresh`` None), never fresh.

:func:`raise_alert` appends an :class:`Alert` to the warehouse's alerts table
``<warehouse>/_kappa/alerts`` (Delta, delta-rs: ``at``, ``kind``, ``asset``, ``version``, ``state``
``firing``/``resolved``, ``message``, ``details`` JSON) when the state of ``(kind, asset)`` changes,
and posts it as JSON to the webhook ``KAPPA_ALERT_WEBHOOK`` if set (the notifier; a failed post is
logged and the alert stays in the table). Dagster's health sensor evaluates freshness on every
tick and raises ``freshness`` and ``query_stopped`` alerts; ``kappa status`` shows the breach.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from kappa.config import Settings
from kappa.core.storage import delta_rs_options, delta_rs_uri, join
from kappa.delta.registry import Registry
from kappa.errors import KappaError

log = logging.getLogger(__name__)

#: The alert kinds: an asset behind its declared freshness; a query that stopped (failed).
ALERT_KINDS = ("freshness", "query_stopped")


@dataclass
class Freshness:
    """One evaluation of ``asset`` version ``version``: ``lag_records`` (records) and
    ``lag_seconds`` (seconds of event time) as in the module docstring, the declared bounds (None:
    not declared), ``fresh`` (None: not evaluated, ``reason`` says why) and ``reason`` (one line
    naming each bound exceeded)."""

    asset: str
    version: int
    lag_records: int | None
    lag_seconds: float | None
    max_lag_records: int | None
    max_lag_seconds: float | None
    fresh: bool | None
    reason: str
    #: topic -> partition -> records not covered
    behind: dict[str, dict[str, int]] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: ``fresh``, ``NOT EVALUATED (why)`` or ``STALE (what is exceeded)``."""
        if self.fresh is None:
            return f"NOT EVALUATED ({self.reason})"
        return "fresh" if self.fresh else f"STALE ({self.reason})"


def evaluate(settings: Settings, asset: str, registry: Registry | None = None, catalog=None) -> Freshness | None:
    """The freshness of ``asset`` (see the module docstring) in ``catalog`` (default: THE catalog,
    :func:`kappa.delta.declarations.catalog`); None when it declares none. Raises
    :class:`kappa.spec.SpecError` for an asset the catalog lacks."""
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.streaming.provenance import batch_watermarks

    catalog = catalog or catalog_of(settings)
    spec = catalog[asset]
    if spec.freshness is None:
        return None
    registry = registry or Registry(settings)
    version = registry.promoted(asset) or registry.latest(asset)
    bounds = dict(max_lag_records=spec.freshness.max_lag_records, max_lag_seconds=spec.freshness.max_lag_seconds)
    if version is None:
        return Freshness(asset, 0, None, None, **bounds, fresh=None, reason=f"{asset} has no version yet")
    batches = batch_watermarks(settings, version, registry)
    if not batches or batches[-1].watermark is None:
        why = ("no micro-batch committed yet" if not batches
               else "its newest micro-batch does not record the offsets it covers")
        return Freshness(asset, version.version, None, None, **bounds, fresh=None, reason=f"{version.name}: {why}")
    try:
        behind, lag_seconds = _behind(settings, batches[-1].watermark, catalog)
    except KappaError as e:  # the broker does not answer: nothing measured
        return Freshness(asset, version.version, None, None, **bounds, fresh=None,
                         reason=f"the log end offsets could not be read: {e}")
    lag_records = sum(n for parts in behind.values() for n in parts.values())
    exceeded = []
    if bounds["max_lag_records"] is not None and lag_records > bounds["max_lag_records"]:
        exceeded.append(f"{lag_records:,} records behind the log end > {bounds['max_lag_records']:,}")
    if bounds["max_lag_seconds"] is not None and lag_seconds > bounds["max_lag_seconds"]:
        exceeded.append(f"{lag_seconds:,.0f} s of event time behind the log end > {bounds['max_lag_seconds']:,.0f} s")
    return Freshness(asset, version.version, lag_records, round(lag_seconds, 3), **bounds, fresh=not exceeded,
                     reason="; ".join(exceeded) or "within its freshness", behind=behind)


def _behind(settings: Settings, watermark: dict[str, dict[str, int]], catalog) -> tuple[dict, float]:
    """(topic -> partition -> records between ``watermark`` and the log end, seconds of event time
    behind the log end as in the module docstring): one metadata read per topic and two records
    read back per partition that is behind."""
    from kappa.kafka.topics import offsets, records_at

    behind: dict[str, dict[str, int]] = {}
    first, last = [], []
    for po in offsets(settings, sorted(watermark), timeout_s=10):
        covered = max(watermark[po.topic].get(str(po.partition), po.start), po.start)
        n = max(0, po.end - covered)
        behind.setdefault(po.topic, {})[str(po.partition)] = n
        if n:
            first.append((po.topic, po.partition, covered))
            last.append((po.topic, po.partition, po.end - 1))
    if not first:
        return behind, 0.0
    records = records_at(settings, first + last, timeout_s=10)
    times = {(r.topic, r.partition, r.offset): _event_time_ms(r, catalog.event_time_field(r.topic)) for r in records}
    if None in times.values():  # one clock for all: the broker's, when any event time cannot be read
        times = {(r.topic, r.partition, r.offset): r.timestamp_ms for r in records}
    earliest = [times[c] for c in first if c in times]
    latest = [times[c] for c in last if c in times]
    if not earliest or not latest:
        return behind, 0.0
    return behind, max(0.0, (max(latest) - min(earliest)) / 1000)


def _event_time_ms(record, name: str | None) -> int | None:
    """``record``'s event time in epoch ms: its JSON value's field ``name`` (an ISO-8601 date-time);
    None when there is no such field or it cannot be read."""
    if name is None or not record.value:
        return None
    try:
        at = datetime.fromisoformat(str(json.loads(record.value).get(name)).replace("Z", "+00:00"))
    except (ValueError, AttributeError, TypeError):
        return None
    return int((at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp() * 1000)


@dataclass
class Alert:
    """One alert: ``kind`` (:data:`ALERT_KINDS`), the asset and version, ``state`` ``firing`` or
    ``resolved``, a one-line ``message``, JSON ``details`` and ``at`` (UTC)."""

    kind: str
    asset: str
    version: int
    state: str
    message: str
    details: dict = field(default_factory=dict)
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def to_json(self) -> dict:
        """The alert as the webhook receives it: plain JSON values, ``at`` ISO 8601."""
        return {**asdict(self), "at": self.at.isoformat()}


def alerts_path(settings: Settings) -> str:
    """``<warehouse>/_kappa/alerts``: the alerts table."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_kappa", "alerts")


def alerts(settings: Settings, asset: str | None = None) -> list[dict]:
    """Every alert recorded (oldest first), optionally of one asset, ``details`` decoded."""
    from kappa.delta.tables import dataset, is_table

    path = alerts_path(settings)
    if not is_table(path, settings):
        return []
    rows = dataset(path, settings).to_table().to_pylist()
    rows = [{**r, "details": json.loads(r["details"] or "{}")} for r in rows if asset is None or r["asset"] == asset]
    return sorted(rows, key=lambda r: r["at"])


def alert_states(settings: Settings) -> dict[tuple[str, str], str]:
    """(kind, asset) -> the state of its last alert (``firing`` or ``resolved``), from the table."""
    return {(a["kind"], a["asset"]): a["state"] for a in alerts(settings)}


def raise_alert(settings: Settings, alert: Alert, states: dict[tuple[str, str], str] | None = None) -> bool:
    """Record ``alert`` and notify (module docstring) if the last alert of its ``(kind, asset)`` was
    not in the same state (a resolved alert without a firing one before it is dropped too).
    ``states``: :func:`alert_states` read once by a caller raising many (updated here); None reads
    the table. Returns whether it was raised. Raises ``ValueError`` for an unknown kind or state."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if alert.kind not in ALERT_KINDS or alert.state not in ("firing", "resolved"):
        raise ValueError(f"unknown alert kind/state {alert.kind!r}/{alert.state!r}")
    states = alert_states(settings) if states is None else states
    if states.get((alert.kind, alert.asset), "resolved") == alert.state:
        return False
    states[(alert.kind, alert.asset)] = alert.state
    path = alerts_path(settings)
    row = {**asdict(alert), "details": json.dumps(alert.details, default=str)}
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC")), ("kind", pa.string()), ("asset", pa.string()),
                        ("version", pa.int64()), ("state", pa.string()), ("message", pa.string()),
                        ("details", pa.string())])
    write_deltalake(delta_rs_uri(path), pa.Table.from_pylist([row], schema=schema), mode="append",
                    storage_options=delta_rs_options(path, settings))
    notify(settings, alert)
    return True


def notify(settings: Settings, alert: Alert) -> None:
    """POST ``alert`` (:meth:`Alert.to_json`) to ``KAPPA_ALERT_WEBHOOK`` (a Slack-style incoming
    webhook or any receiver of JSON), 10 s timeout; nothing when unset. A failure is logged, not
    raised: the alert is in the table either way."""
    import urllib.request

    url = settings.alert_webhook
    if not url:
        return
    body = json.dumps({"text": f"[kappa] {alert.kind} {alert.state}: {alert.message}", **alert.to_json()},
                      default=str).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
    except OSError as e:
        log.warning("alert webhook %s failed: %s (the alert is recorded in %s)", url, e, alerts_path(settings))
