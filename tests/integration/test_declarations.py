"""Assets added, edited and retired at run time (``kappa declarations``, :mod:`kappa.lifecycle.declare`),
on real parts: the declarations log in the warehouse, the session broker, Spark and Delta. A version
runs and checks the declaration it recorded; a stale edit, a dependent reader and a policy breach are
refused with the source and the rule named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kappa.delta.declarations import DeclarationError, Declarations, catalog, text_fingerprint
from kappa.delta.registry import Registry
from kappa.lifecycle import declare
from kappa.quality.gate import run_gate
from kappa.runners import run_until_caught_up
from kappa.runners.versions import LogicChangedError
from kappa.streaming.policy import PolicyError

from .helpers import ingest, table

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KAPPA = str(Path(sys.executable).parent / "kappa")
SLICE = 2_000

LATE = """\
name: late_departures
layer: gold
group: flights
owner: team:data-eng
description: Departures more than an hour late, with the delay in hours.
source:
  asset: flights
transform:
  sql: |
    SELECT event_id, event_time, carrier, origin, dep_delay / 60.0 AS delay_hours
    FROM input WHERE dep_delay > 60
expectations:
  - expect_column_values_to_not_be_null: {column: event_id}
"""

BY_ORIGIN = """\
name: late_by_origin
layer: gold
source:
  asset: late_departures
transform:
  sql: SELECT origin, event_time, delay_hours FROM input WHERE origin = 'JFK'
"""


#: A variable of the CLI's environment standing for the writers' keys (issue 40).
CANARY_VARIABLE, CANARY = "KAPPA_TEST_CANARY_SECRET", f"canary-{os.getpid()}"


def kappa(settings, *args: str, command: tuple[str, ...] = (KAPPA,)) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "KAPPA_HOME": str(settings.home),
           "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
           "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port), CANARY_VARIABLE: CANARY}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


def probe(pwned: Path) -> str:
    """A declaration whose expectation's row_condition (no condition_parser) runs ``touch pwned``."""
    return ("name: probe\nlayer: gold\nsource: {asset: flights}\ntransform: {sql: SELECT event_id FROM input}\n"
            "expectations:\n  - expect_column_values_to_not_be_null:\n      column: event_id\n"
            f"      row_condition: \"EXISTS (SELECT TRANSFORM(1) USING 'touch {pwned}' AS (a STRING))\"\n")


def test_an_asset_added_at_run_time_runs_and_checks_the_text_its_version_recorded(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=SLICE)
    run_until_caught_up(settings, ["flights"], spark=spark)

    # add_asset's library: validated, within policy, run on a sample of flights, recorded
    change = declare.add(settings, LATE, apply=True, who="ana@example.com", spark=spark, sample=True)
    sample = change.analysis
    assert sample.sample == {"flights": {"version": "flights/v1", "rows": 1000}}
    assert list(sample.schema) == ["event_id", "event_time", "carrier", "origin", "delay_hours"]
    assert sample.schema["delay_hours"] == "double" and 0 < sample.row_count < 1000 and sample.passed
    [expectation] = [c for c in sample.checks if c["name"] == "expect_column_values_to_not_be_null__event_id"]
    assert expectation["passed"] and expectation["evaluated"]
    assert not (Path(settings.warehouse) / "_kappa" / "scratch").exists() or not any(
        (Path(settings.warehouse) / "_kappa" / "scratch").iterdir())
    # its CLI twin lists what was recorded
    listed = kappa(settings, "declarations", "list", "--format", "json")
    [active] = json.loads(listed.stdout)
    assert (active["asset"], active["event"], active["who"], active["yaml"]) == (
        "late_departures", "added", "ana@example.com", LATE)
    assert active["fingerprint"] == text_fingerprint(LATE)
    assert catalog(settings)["late_departures"].where == "declarations:late_departures"

    # it runs like any asset, and equals the filter computed from the silver table
    run_until_caught_up(settings, ["late_departures"], spark=spark)
    flights = table(settings, "flights")
    expected = flights[flights.dep_delay > 60]
    actual = table(settings, "late_departures")
    assert len(expected) > 50
    assert sorted(actual.event_id) == sorted(expected.event_id)
    hours = dict(zip(actual.event_id, actual.delay_hours))
    assert all(abs(hours[e] - d / 60.0) < 1e-9 for e, d in zip(expected.event_id, expected.dep_delay))
    v1 = Registry(settings).version("late_departures", 1)
    assert (v1.declaration, v1.source) == (LATE, "declarations:late_departures")
    assert Registry(settings).version("flights", 1).source == "flights/flights.yaml"

    # an edit made from a stale text is refused; a check added later is not v1's: the gate reads v1's text
    stricter = LATE + "  - expect_column_values_to_be_between: {column: delay_hours, max_value: 1}\n"
    with pytest.raises(DeclarationError, match="stale edit: the declaration is at fingerprint"):
        declare.edit(settings, stricter, "0" * 16, spark=spark)
    # an edit not applied is recorded as proposed, as an add is; the active text stays
    proposed = declare.edit(settings, stricter, active["fingerprint"], apply=False, spark=spark)
    assert (proposed.event, proposed.recorded.event, proposed.recorded.yaml) == ("proposed", "proposed", stricter)
    assert proposed.recorded.replaces == active["fingerprint"]
    assert Declarations(settings).active()["late_departures"].fingerprint == active["fingerprint"]
    change = declare.edit(settings, stricter, active["fingerprint"], spark=spark)
    assert not change.logic_changed
    report = run_gate(settings, "late_departures", 1, spark=spark)
    assert report.passed and not [c for c in report.checks if "between" in c.name]

    # a change of logic says a replay is needed, and the old version will not run the new text
    changed = stricter.replace("dep_delay > 60", "dep_delay > 90")
    change = declare.edit(settings, changed, text_fingerprint(stricter), spark=spark)
    assert change.logic_changed and any("kappa replay late_departures" in n for n in change.notes)
    with pytest.raises(LogicChangedError):
        run_until_caught_up(settings, ["late_departures"], spark=spark)

    # a declaration over a declared upstream runs on a sample of it: the scratch catalog holds the
    # active declarations, not only the files and the new text
    by_origin = declare.add(settings, BY_ORIGIN, apply=True, who="ana@example.com", spark=spark, sample=True)
    late_v1 = table(settings, "late_departures", 1)
    assert 0 < len(late_v1) < 1000
    assert by_origin.analysis.sample == {"late_departures": {"version": "late_departures/v1", "rows": len(late_v1)}}
    assert list(by_origin.analysis.schema) == ["origin", "event_time", "delay_hours"]
    assert by_origin.analysis.row_count == int((late_v1.origin == "JFK").sum()) > 0

    # retiring: refused while a declared asset reads it; the reader first, then it
    with pytest.raises(DeclarationError, match=r"cannot retire late_departures: assets \['late_by_origin'\] read it"):
        declare.retire(settings, "late_departures")
    declare.retire(settings, "late_by_origin", reason="not needed")
    retired = declare.retire(settings, "late_departures", reason="replaced")
    assert any(v1.table_path in n and "tables are kept" in n for n in retired.notes)
    assert "late_departures" not in catalog(settings).assets
    registry = Registry(settings)
    assert registry.promoted("late_departures") is None and "late_departures" not in registry.unpromoted()
    assert [e.event for e in Declarations(settings).events("late_departures")] == ["added", "proposed", "edited",
                                                                                  "edited", "retired"]

    # Issue 40, the attacks of the writable Dagster UI through add_asset's library and its CLI twin,
    # on a real sample of flights: each is refused before anything runs on the sample.
    pwned = Path(settings.home) / "pwned"
    leak = BY_ORIGIN.replace("name: late_by_origin", "name: leak").replace("asset: late_departures", "asset: flights") \
        .replace("SELECT origin, event_time, delay_hours FROM input WHERE origin = 'JFK'",
                 "SELECT event_id, '${env:HOME}' AS h, '${system:user.dir}' AS d FROM input")
    for text, field, rule in ((leak, "transform.sql", "substitution"),
                              (probe(pwned), "expectations.0.expect_column_values_to_not_be_null.row_condition",
                               "operator")):
        with pytest.raises(PolicyError) as refused:
            declare.add(settings, text, apply=True, who="mallory@example.com", spark=spark, sample=True)
        assert (refused.value.field, refused.value.rule) == (field, rule)
    assert not pwned.exists() and {"leak", "probe"}.isdisjoint(e.asset for e in Declarations(settings).events())
    path = Path(settings.home) / "leak.yaml"
    path.write_text(leak.replace("${env:HOME}", "${env:%s}" % CANARY_VARIABLE))
    cli = kappa(settings, "declarations", "add", str(path))
    print(f"kappa declarations add leak.yaml: exit {cli.returncode}: {cli.stdout[-600:]}{cli.stderr[-600:]}")
    assert CANARY not in cli.stdout + cli.stderr
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert "declarations:leak: transform.sql: refused (rule: substitution)" in cli.stderr

    # A declaration written straight into the log (no check) does not start: neither the query of
    # a local run nor the Kubernetes driver's entrypoint, nor the gate's GX (its row_condition).
    Declarations(settings).record("probe", "added", probe(pwned), who="mallory@example.com")
    with pytest.raises(PolicyError, match=r"^declarations:probe: expectations\.0\..*row_condition: refused "
                                          r"\(rule: operator\)"):
        run_until_caught_up(settings, ["probe"], spark=spark)
    version = Registry(settings).latest("probe")  # created, recorded failed, never started
    driver = kappa(settings, "--asset", "probe", "--version", str(version.version),
                   "--upstream", f"flights={version.upstream['flights']}",
                   command=(sys.executable, "-m", "kappa.runners.entrypoint"))
    print(f"entrypoint: exit {driver.returncode}: {driver.stderr.strip().splitlines()[-1:]}")
    assert driver.returncode == 3 and driver.stderr.strip().splitlines()[-1].startswith(
        "probe/v1 not started: declarations:probe: expectations.0.")
    with pytest.raises(PolicyError, match="rule: operator"):
        run_gate(settings, "probe", version.version, spark=spark)
    assert not pwned.exists()
    events = Registry(settings).events("probe")
    assert [e["event"] for e in events] == ["created", "running", "failed"]
    assert events[-1]["details"]["error"].startswith("declarations:probe: expectations.0.")


@pytest.mark.parametrize("sql, rule", [
    ("SELECT * FROM parquet.`/etc`", "relation"),
    ("SELECT reflect('java.lang.System', 'exit', 1) AS x FROM input", "function"),
])
def test_a_declaration_the_policy_refuses_names_the_rule_and_records_nothing(make_env, spark, sql, rule):
    settings, _ = make_env()
    text = BY_ORIGIN.replace("asset: late_departures", "asset: flights").replace(
        "SELECT origin, event_time, delay_hours FROM input WHERE origin = 'JFK'", sql)
    with pytest.raises(PolicyError) as refused:
        declare.add(settings, text, apply=True, spark=spark)
    assert refused.value.rule == rule
    assert str(refused.value).startswith(f"declarations:late_by_origin: transform.sql: refused (rule: {rule})")
    assert Declarations(settings).events() == []


def test_a_file_declared_asset_is_not_retired_from_the_declarations(make_env):
    settings, _ = make_env()
    with pytest.raises(DeclarationError, match=r"declarations:flights: no active declaration named 'flights'; it is "
                                               r"declared in .*flights\.yaml: remove the file to retire it"):
        declare.retire(settings, "flights")
    with pytest.raises(DeclarationError, match="already declared|is declared in"):
        declare.validate(settings, (REPO / "assets" / "flights" / "flights.yaml").read_text(), replacing=True)


def test_on_kubernetes_a_declaration_reading_a_topic_is_refused_for_want_of_a_kafka_user(make_env):
    settings, suffix = make_env()
    settings = settings.model_copy(update={"runner": "kubernetes"})
    text = LATE.replace("source:\n  asset: flights", f"source:\n  kafka: {{topics: [flights_{suffix}]}}").replace(
        "transform:\n  sql: |\n    SELECT event_id, event_time, carrier, origin, dep_delay / 60.0 AS delay_hours\n"
        "    FROM input WHERE dep_delay > 60\n", "transform:\n  raw: {}\n").replace("layer: gold", "layer: bronze")
    with pytest.raises(DeclarationError) as refused:
        declare.validate(settings, text)
    assert str(refused.value).startswith(
        f"declarations:late_departures: source.kafka.topics: flights_{suffix} not covered by the chart's KafkaUsers")
    assert "kappa-asset-late-departures" in str(refused.value)
    declare.validate(settings.model_copy(update={"runner": "local"}), text)  # the laptop has no such rule


def test_the_cli_refuses_a_bad_declaration_naming_it_and_the_field(make_env, tmp_path):
    settings, _ = make_env()
    path = tmp_path / "late.yaml"
    path.write_text(LATE.replace("layer: gold", "layer: platinum"))
    refused = kappa(settings, "declarations", "add", str(path), "--apply")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "declarations:late_departures: layer: Input should be 'bronze', 'silver' or 'gold'" in refused.stderr
    # an argument Great Expectations refuses: named at validation, before anything runs
    path.write_text(LATE.replace("{column: event_id}", "{column: event_id, colour: red}"))
    refused = kappa(settings, "declarations", "add", str(path), "--apply")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert ("declarations:late_departures: expectations.0: expect_column_values_to_not_be_null: colour: extra fields "
            "not permitted") in refused.stderr.replace("\n", ""), refused.stderr
    assert json.loads(kappa(settings, "declarations", "list", "--all", "--format", "json").stdout) == []
