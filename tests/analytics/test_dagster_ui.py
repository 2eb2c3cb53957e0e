"""The Dagster UI shows the registry's truth: `dagster dev` over a state where the CLI path ran the
gate and promoted v1 (as `make demo` does), the asset's Checks tab rendered by headless Chromium
shows the promoted version's checks evaluated and passed. The screenshot is kept in
``.kappa/test-artifacts/`` (git-ignored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ..conftest import REPO, dagster_instance, free_port
from kappa.core import processes
from ..cdp import Browser
from ..graphql import post as _post
from .conftest import SERVE_CA, SERVE_PASSWORD, SERVE_USER, kappa
from ..integration.helpers import WINDOW, WINDOW_ASSET

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = REPO / ".kappa" / "test-artifacts"
#: A variable of the webserver's (and so every run's) environment standing for the writers' keys.
CANARY_VARIABLE, CANARY = "KAPPA_TEST_CANARY_SECRET", f"canary-{os.getpid()}-{time.time_ns()}"

CHECKS = """
query {
  assetNodeOrError(assetKey: {path: ["flights"]}) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks {
        name
        executionForLatestMaterialization { status evaluation { success metadataEntries { label } } }
      } } }
    }
  }
  assetOrError(assetKey: {path: ["flights"]}) {
    ... on Asset { assetMaterializations(limit: 5) { metadataEntries { label
      ... on IntMetadataEntry { intValue } } } }
  }
}
"""


@pytest.fixture(scope="module")
def dagster_dev(served, tmp_path_factory):
    """(base URL, log path): `dagster dev` over the analysts' state, as a data engineer starts it
    (``make dagster``: the webserver and the daemon, KAPPA_DAGSTER_URL naming the webserver)."""
    settings, _ = served
    tmp_path = tmp_path_factory.mktemp("dagster_dev")
    port = free_port()
    home = tmp_path / "dagster_home"
    home.mkdir()
    dagster_instance(home)
    log_path = tmp_path / "dagster.log"
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "KAPPA_HOME": str(settings.home),
           "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
           "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port), "KAPPA_DAGSTER_URL": base,
           "KAPPA_SERVE_USER": SERVE_USER, "KAPPA_SERVE_PASSWORD": SERVE_PASSWORD,
           "KAPPA_SERVE_TLS_CA_FILE": str(SERVE_CA),
           # a secret in the runs' environment, which a declaration must not be able to read
           CANARY_VARIABLE: CANARY}
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1",
                                 "-p", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield base, log_path, proc
    finally:
        processes.terminate(proc.pid, grace_s=60, group=True)  # the server's whole process group


def test_checks_tab_shows_the_promoted_versions_gate_passed(served, dagster_dev, tmp_path):
    from kappa.delta.registry import Registry

    settings, _ = served
    base, log_path, proc = dagster_dev
    promoted = Registry(settings).promoted("flights")
    # The daemon runs the kappa_registry sensor; wait until its first tick has been recorded.
    started = time.monotonic()
    deadline = started + 420
    checks: list = []
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        data = _post(f"{base}/graphql", CHECKS)
        node = (data.get("data") or {}).get("assetNodeOrError") or {}
        checks = (node.get("assetChecksOrError") or {}).get("checks") or []
        if checks and all(c["executionForLatestMaterialization"] for c in checks
                          if c["name"] != "query_health"):
            break
        time.sleep(3)
    served_s, started = time.monotonic() - started, time.monotonic()
    gate = [c for c in checks if c["name"] != "query_health"]
    assert gate, f"no checks served: {log_path.read_text()[-3000:]}"
    for c in gate:
        execution = c["executionForLatestMaterialization"]
        assert execution is not None, f"{c['name']} not evaluated"
        if c["name"] == "shadow_diff":  # v1 was the first version promoted: nothing to compare with
            assert execution["status"] == "FAILED" and not execution["evaluation"]["success"], c
        else:
            assert execution["status"] == "SUCCEEDED" and execution["evaluation"]["success"], c
        labels = {e["label"] for e in execution["evaluation"]["metadataEntries"]}
        assert {"version", "observed", "expected"} <= labels, c
    [latest, *_] = data["data"]["assetOrError"]["assetMaterializations"]
    md = {e["label"]: e.get("intValue") for e in latest["metadataEntries"]}
    assert md["version"] == promoted.version and "source_offsets" in md and md["dagster/row_count"] > 0

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / "dagster-flights-checks.png"
    png.unlink(missing_ok=True)
    url = f"{base}/assets/flights?view=checks"
    # One browser: open the Checks tab, wait until it lists the gate's checks with their latest
    # result (bounded), then read the page and photograph it as rendered.
    names = json.dumps([c["name"] for c in gate])
    rendered = (f"(() => {{ const dom = document.documentElement.outerHTML; "
                f"return {names}.every(n => dom.includes(n)) && "
                "(dom.includes('Passed') || dom.includes('Succeeded')) && "
                "!dom.replaceAll('query_health', '').includes('Not evaluated'); })()")
    with Browser(tmp_path / "chrome") as browser:
        browser.goto(url)
        try:
            browser.wait_for(rendered, timeout=120, what="the Checks tab with the gate's checks evaluated")
        finally:
            browser.screenshot(png)
            dom = browser.eval("document.documentElement.outerHTML") or ""
    assert png.exists() and png.stat().st_size > 10_000
    # The rendered page lists the gate's checks with their latest result.
    for c in gate:
        assert c["name"] in dom, c["name"]
    assert "Passed" in dom or "Succeeded" in dom
    assert "Not evaluated" not in dom.replace("query_health", "")
    print(f"\nchecks served {served_s:.1f} s after `dagster dev` started; the Checks tab rendered in "
          f"{time.monotonic() - started:.1f} s")


LOCATION = """
query {
  repositoriesOrError { ... on RepositoryConnection { nodes { jobs { name } } } }
  assetNodeOrError(assetKey: {path: ["%s"]}) {
    __typename
    ... on AssetNode { assetChecksOrError { ... on AssetChecks { checks { name blocking } } } }
  }
}
""" % WINDOW_ASSET


def readme_launchpad() -> str:
    """The launchpad config of the README's walkthrough (Dagster, "1. **Add it.**"), as typed there:
    the test types exactly what the README tells a person to type."""
    text = (REPO / "README.md").read_text()
    block = text.split("1. **Add it.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return textwrap.dedent(block).strip() + "\n"


def test_a_data_engineer_adds_a_window_asset_from_the_ui_and_analysts_read_it_by_name(served, dagster_dev, tmp_path):
    """Items 6 and the done-when of issue 22, as a person would do it: a bad declaration fails naming
    the field, and SQL reading a path is refused naming the policy's rule; the launchpad of
    ``add_asset`` in Chromium adds a window asset over ``flights`` (its analyze step shows the
    sample); the workspace gains it with its checks; a stale edit is refused; materializing and
    promoting it from Dagster writes a table that `kappa sql` reads by its name and that equals the
    windows computed from the silver table; the replay job promotes a v2 and the rollback job points
    the name back at v1; retiring it from Dagster takes it away again."""
    from tests.graphql import launch, wait_for_run
    from tests.integration.helpers import table

    from kappa.delta.registry import Registry

    settings, _ = served
    base, log_path, proc = dagster_dev
    data = _wait_for_declaration_jobs(base, log_path, proc)
    assert data["assetNodeOrError"]["__typename"] == "AssetNotFoundError"

    # a bad declaration fails its first step, and the error names the declaration and the field
    bad = WINDOW.replace("size: 3 hours", "size: three hours")
    status, events = wait_for_run(base, launch(base, "add_asset", {"ops": {"validate_declaration": {"config": {
        "declaration": bad, "apply": True}}}}))
    [failure] = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert status == "FAILURE" and failure["stepKey"] == "validate_declaration"
    assert f"declarations:{WINDOW_ASSET}: transform.window.size" in failure["error"]["message"], failure

    # SQL that reads files by path is refused by the run-time policy, naming its rule
    peek = ("name: peek\nlayer: gold\nsource: {asset: flights}\n"
            "transform: {sql: 'SELECT * FROM parquet.`/etc`'}\n")
    status, events = wait_for_run(base, launch(base, "add_asset", {"ops": {"validate_declaration": {"config": {
        "declaration": peek, "apply": True}}}}))
    [failure] = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert status == "FAILURE" and failure["stepKey"] == "validate_declaration"
    assert "declarations:peek: transform.sql: refused (rule: relation)" in failure["error"]["message"], failure

    # the launchpad, in a browser: type the README's run config, launch, wait, open the new asset's page
    typed = readme_launchpad()
    assert yaml.safe_load(typed) == {"ops": {"validate_declaration": {"config": {
        "declaration": WINDOW, "apply": True, "who": "ana@example.com", "reason": "3-hour delay windows"}}}}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with Browser(tmp_path / "chrome") as browser:
        browser.goto(f"{base}/locations/kappa/jobs/add_asset/playground")
        browser.wait_for("!!document.querySelector('.CodeMirror')", what="the launchpad's editor")
        browser.eval(f"document.querySelector('.CodeMirror').CodeMirror.setValue({json.dumps(typed)})")
        browser.click_button("Launch Run")
        path = browser.wait_for("location.pathname.startsWith('/runs/') && location.pathname", what="the run's page")
        status, events = wait_for_run(base, path.split("/")[2], timeout=420)
        assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
        add_s = time.monotonic() - started
        browser.goto(f"{base}/assets/{WINDOW_ASSET}")
        try:
            browser.wait_for(f"document.body.innerText.includes('{WINDOW_ASSET}') && "
                             "document.body.innerText.includes('Materialize') && "
                             "document.body.innerText.includes('data-eng')", what="the new asset's page")
        finally:
            png = browser.screenshot(ARTIFACTS / "dagster-add-asset.png")
            (ARTIFACTS / "dagster-add-asset.txt").write_text(browser.eval("document.body.innerText") or "")
    assert png.stat().st_size > 10_000
    outputs = {e["stepKey"]: {m["label"] for m in e["metadataEntries"]} for e in events
               if e["__typename"] == "ExecutionStepOutputEvent"}
    assert {"schema", "sample_rows", "checks_on_sample"} <= outputs["analyze_declaration"], outputs
    assert {"event", "fingerprint"} <= outputs["record_declaration"]
    steps = {e["stepKey"]: e["seconds"] for e in events if e["__typename"] == "StepStats"}
    print(f"add_asset from the launchpad: {add_s:.1f} s (steps, s: {steps})")

    # the workspace gained the asset and its checks
    node = _post(f"{base}/graphql", LOCATION)["data"]["assetNodeOrError"]
    checks = {c["name"]: c["blocking"] for c in node["assetChecksOrError"]["checks"]}
    assert checks.pop("query_health") is False
    assert set(checks) >= {"expect_column_values_to_not_be_null__window_start", "shadow_diff"}, checks
    assert checks["row_expectation__delayed_within_flights"] is True  # the per-row expectation blocks above 0

    # an edit made from a text someone changed since is refused at its first step
    status, events = wait_for_run(base, launch(base, "edit_asset", {"ops": {"validate_edit": {"config": {
        "declaration": WINDOW.replace("3-hour windows", "three-hour windows"), "expected_fingerprint": "0" * 16,
        "apply": True}}}}))
    [failure] = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert status == "FAILURE" and failure["stepKey"] == "validate_edit"
    assert f"declarations:{WINDOW_ASSET}: stale edit: the declaration is at fingerprint" in failure["error"]["message"]

    # materialize it, promote it, and read it by name
    status, events = wait_for_run(base, launch(base, "__ASSET_JOB", assets=[WINDOW_ASSET]), timeout=420)
    assert status == "SUCCESS", events
    status, events = wait_for_run(base, launch(base, "promote_version", {"ops": {"promote_stable_name": {
        "config": {"asset": WINDOW_ASSET, "version": 1}}}}))
    assert status == "SUCCESS", events
    v1 = Registry(settings).promoted(WINDOW_ASSET)
    assert v1 is not None and v1.version == 1 and v1.source == f"declarations:{WINDOW_ASSET}"
    read = kappa(settings, "sql", f"SELECT carrier, window_start, flights, delayed FROM {WINDOW_ASSET}",
                 "--format", "json")
    assert read.returncode == 0, read.stderr
    actual = pd.DataFrame(json.loads(read.stdout))
    flights = table(settings, "flights", v1.upstream["flights"])
    flights["window_start"] = pd.to_datetime(flights.event_time, utc=True).dt.floor("3h")
    expected = flights.groupby(["carrier", "window_start"]).agg(
        flights=("event_id", "size"), delayed=("dep_delay", lambda d: int((d > 15).sum()))).reset_index()
    actual["window_start"] = pd.to_datetime(actual.window_start, utc=True)
    key = ["carrier", "window_start"]
    assert len(expected) > 20
    pd.testing.assert_frame_equal(actual.sort_values(key).reset_index(drop=True)[expected.columns],
                                  expected.sort_values(key).reset_index(drop=True), check_dtype=False)

    # a second version, from the replay job, promoted; the rollback job points the name back at v1
    started = time.monotonic()
    status, events = wait_for_run(base, launch(base, "replay", {"ops": {"replay_asset": {"config": {
        "asset": WINDOW_ASSET, "promote": True}}}}), timeout=420)
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    v2 = Registry(settings).promoted(WINDOW_ASSET)
    assert v2.version == 2 and v2.source == f"declarations:{WINDOW_ASSET}"
    status, events = wait_for_run(base, launch(base, "rollback", {"ops": {"rollback_stable_names": {"config": {
        "asset": WINDOW_ASSET}}}}))
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    [output] = [e for e in events if e["__typename"] == "ExecutionStepOutputEvent"]
    assert {"promoted", "previous", "pins"} <= {m["label"] for m in output["metadataEntries"]}
    back = Registry(settings).promoted(WINDOW_ASSET)
    assert (back.version, back.table_path) == (1, v1.table_path)
    print(f"replay (v2, promoted) and rollback (to v1) from Dagster: {time.monotonic() - started:.1f} s")

    # retired from Dagster: gone from the workspace, no longer a stable name; its table is kept
    status, events = wait_for_run(base, launch(base, "retire_asset", {"ops": {"retire_declaration": {"config": {
        "asset": WINDOW_ASSET, "who": "ana@example.com", "reason": "the demo is over"}}}}))
    assert status == "SUCCESS", events
    assert _post(f"{base}/graphql", LOCATION)["data"]["assetNodeOrError"]["__typename"] == "AssetNotFoundError"
    assert Registry(settings).promoted(WINDOW_ASSET) is None
    assert len(table(settings, WINDOW_ASSET, 1)) == len(expected)


SAMPLE_ROWS = """
query Run($runId: ID!) {
  logsForRun(runId: $runId) { ... on EventConnection { events {
    ... on ExecutionStepOutputEvent { stepKey metadataEntries { label ... on MarkdownMetadataEntry { mdStr } } }
  } } }
}
"""


def _wait_for_declaration_jobs(base: str, log_path: Path, proc) -> dict:
    """The data of :data:`LOCATION` once the code location has loaded with the declarations jobs
    (``add_asset`` among them); fails after 300 s, or if `dagster dev` exited, with its log's tail."""
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        data = _post(f"{base}/graphql", LOCATION).get("data") or {}
        if "add_asset" in {j["name"] for n in (data.get("repositoriesOrError") or {}).get("nodes", [])
                           for j in n["jobs"]}:
            return data
        assert time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(2)


def test_add_asset_refuses_substitution_and_a_script_in_a_row_condition_at_validation(served, dagster_dev, tmp_path):
    """Issue 40 items 3 and 7, from the writable UI's GraphQL as an attacker would: ``${env:…}`` in a
    ``sql:`` transform (Spark substituted the run's environment before the policy parsed it, and
    ``analyze_declaration`` showed the value in ``sample_rows``), and a GX ``row_condition`` without
    ``condition_parser`` running a script (GX 1.24 hands it to ``DataFrame.filter``; the policy never
    looked at it, and the gate on the sample ran ``touch``). Both fail at ``validate_declaration``
    naming the field and the rule: no step runs Spark on them, nothing is in ``sample_rows``, no file
    is created, nothing is recorded."""
    from tests.graphql import launch, wait_for_run

    from kappa.delta.declarations import Declarations

    settings, _ = served
    base, log_path, proc = dagster_dev
    _wait_for_declaration_jobs(base, log_path, proc)
    pwned = tmp_path / "pwned"
    attacks = [
        ("leak", f"name: leak\nlayer: gold\nsource: {{asset: flights}}\ntransform:\n"
                 f"  sql: SELECT event_id, '${{env:{CANARY_VARIABLE}}}' AS k FROM input\n",
         "declarations:leak: transform.sql: refused (rule: substitution)"),
        ("probe", "name: probe\nlayer: gold\nsource: {asset: flights}\ntransform: {sql: SELECT event_id FROM input}\n"
                  "expectations:\n  - expect_column_values_to_not_be_null:\n      column: event_id\n"
                  f"      row_condition: \"EXISTS (SELECT TRANSFORM(1) USING 'touch {pwned}' AS (a STRING))\"\n",
         "declarations:probe: expectations.0.expect_column_values_to_not_be_null.row_condition: refused "
         "(rule: operator): ScriptTransformation"),
    ]
    runs = []
    for name, text, refused in attacks:  # both run before any assertion: each one's outcome is printed
        started = time.monotonic()
        run_id = launch(base, "add_asset", {"ops": {"validate_declaration": {"config": {
            "declaration": text, "apply": False, "who": "mallory@example.com"}}}})
        status, events = wait_for_run(base, run_id, timeout=420)
        outputs = _post(f"{base}/graphql", SAMPLE_ROWS, variables={"runId": run_id})["data"]["logsForRun"]["events"]
        shown = [m.get("mdStr") or "" for e in outputs if e.get("stepKey") == "analyze_declaration"
                 for m in e["metadataEntries"] if m["label"] == "sample_rows"]
        failures = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
        print(f"\n{name}: {status} in {time.monotonic() - started:.1f} s; failed steps: "
              f"{[(f['stepKey'], f['error']['message'].strip().splitlines()[0][:200]) for f in failures]}; "
              f"sample_rows: {[md[:300] for md in shown]}; {pwned.name} exists: {pwned.exists()}")
        runs.append((name, refused, status, failures, shown))
    assert not pwned.exists()
    for name, refused, status, failures, shown in runs:
        assert not any(CANARY in md for md in shown), shown
        assert status == "FAILURE" and [f["stepKey"] for f in failures] == ["validate_declaration"], failures
        assert refused in failures[0]["error"]["message"], failures[0]
        assert not shown and Declarations(settings).events(name) == []


AUTOMATION_RUNS = """
query {
  runsOrError(filter: {tags: [{key: "dagster/sensor_name", value: "kappa_automation"}]}) {
    ... on Runs { results { runId status assetSelection { path } } }
  }
}
"""


def test_the_automation_builds_the_dbt_project_on_a_fresh_instance_and_succeeds(served, dagster_dev):
    """Issue 46 item 4: `dagster dev` over a state where flights and weather are promoted and dbt
    never ran in Dagster. The ``kappa_automation`` sensor's runs (launched on its own, while the
    tests above ran) build every dbt node, the seed and the model over it included, so the
    ``relationships`` tests of the staging models find what they join: every run succeeds."""
    from kappa.dagster.definitions import build_definitions

    settings, _ = served
    base, log_path, proc = dagster_dev
    graph = build_definitions(settings.assets_dir).get_repository_def().asset_graph
    project = {k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).group_name == "analytics"}
    deadline, runs, built = time.monotonic() + 420, [], set()
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        data = _post(f"{base}/graphql", AUTOMATION_RUNS).get("data") or {}  # None until the server is up
        runs = (data.get("runsOrError") or {}).get("results") or []
        built = {"/".join(a["path"]) for r in runs for a in r["assetSelection"] or []}
        if built >= project and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs):
            break
        time.sleep(3)
    print(f"\nkappa_automation: {len(runs)} runs, {[(r['status'], len(r['assetSelection'] or [])) for r in runs]}")
    assert built >= project, f"not requested by the automation: {sorted(project - built)}; runs: {runs}"
    assert [r for r in runs if r["status"] != "SUCCESS"] == [], (runs, log_path.read_text()[-4000:])


NARROW_ASSET = "departures_narrow"
NARROW = """\
name: {name}
layer: silver
group: flights
owner: team:data-eng
description: Who departed where and when; the rest of each flights event is not declared (yet).
source:
  kafka:
    topics: [{topic}]
watermark:
  column: event_time
  delay: 2 hours
transform:
  parse:
    event_id: event_id
    event_time: event_time
    schema:
      event_id: {{type: string, required: true}}
      event_time: {{type: timestamp, required: true}}
      carrier: {{type: string, required: true}}
      flight: int
      origin: string
      dest: string
max_quarantine_rate: 0.01
"""

NARROW_CHECKS = """
query {
  assetNodeOrError(assetKey: {path: ["%s"]}) {
    ... on AssetNode { assetChecksOrError { ... on AssetChecks { checks {
      name
      executionForLatestMaterialization { status evaluation { success severity description } }
    } } } }
  }
}
""" % NARROW_ASSET

#: The fields of a flights event the narrow declaration lacks, and the types evolve gives them.
UNDECLARED = {"year": "int", "month": "int", "day": "int", "dep_time": "int", "sched_dep_time": "int",
              "dep_delay": "double", "arr_time": "int", "sched_arr_time": "int", "arr_delay": "double",
              "tailnum": "string", "air_time": "double", "distance": "int", "hour": "int", "minute": "int",
              "time_hour": "timestamp"}


def test_a_data_engineer_sees_schema_drift_in_the_ui_and_evolves_the_declaration_from_it(
        analysts_state, served, dagster_dev, tmp_path):
    """Issue 46, done-when ("the Dagster walk-through covers drift"): a silver asset declared from
    Dagster over the flights topic with six of its fields; materialized from Dagster, its Checks
    tab (Chromium) shows ``schema_drift`` naming the fields it does not declare, as a warning; the
    ``evolve_asset`` job proposes the declaration with them, typed, tried on the rescued records
    read back from the log, and records it; the replay job builds and promotes v2 with every field
    as a column, equal to the producer's values, and nothing rescued. Retired at the end (the
    tests above read the workspace without it)."""
    from tests.graphql import launch, wait_for_run
    from tests.integration.helpers import table

    from kappa.delta.registry import Registry
    from kappa.delta.rescued import rescued_fields
    from tests.analytics.conftest import SLICE

    settings, suffix = analysts_state
    base, log_path, proc = dagster_dev
    _wait_for_declaration_jobs(base, log_path, proc)
    text = NARROW.format(name=NARROW_ASSET, topic=f"flights_{suffix}")
    status, events = wait_for_run(base, launch(base, "add_asset", {"ops": {"validate_declaration": {"config": {
        "declaration": text, "apply": True, "who": "ana@example.com", "reason": "who flew where"}}}}), timeout=420)
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    deadline = time.monotonic() + 120
    while _post(f"{base}/graphql", NARROW_CHECKS)["data"]["assetNodeOrError"] is None:
        assert time.monotonic() < deadline, "the workspace did not gain the asset"
        time.sleep(2)

    status, events = wait_for_run(base, launch(base, "__ASSET_JOB", assets=[NARROW_ASSET]), timeout=420)
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    checks = {c["name"]: c["executionForLatestMaterialization"] for c in
              _post(f"{base}/graphql", NARROW_CHECKS)["data"]["assetNodeOrError"]["assetChecksOrError"]["checks"]}
    drift = checks["schema_drift"]["evaluation"]
    assert drift["success"] is False and drift["severity"] == "WARN", drift  # reported, not blocking
    assert f"{len(UNDECLARED)} undeclared field(s): " in drift["description"], drift
    assert all(f"{name} (" in drift["description"] for name in UNDECLARED), drift
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with Browser(tmp_path / "chrome") as browser:
        browser.goto(f"{base}/assets/{NARROW_ASSET}?view=checks")
        try:
            browser.wait_for("document.body.innerText.includes('schema_drift') && "
                             "document.body.innerText.includes('quarantine_rate')", timeout=120,
                             what="the Checks tab with schema_drift")
            # open the check, as a person clicks it in the list: its latest execution names the fields
            browser.eval("[...document.querySelectorAll('a, button, div')].find(e => e.children.length <= 3 && "
                         "e.innerText && e.innerText.trim().startsWith('schema_drift')).click()")
            browser.wait_for("document.body.innerText.includes('undeclared field(s): ') && "
                             "document.body.innerText.includes('tailnum (')", timeout=60,
                             what="the schema_drift check's latest execution naming the undeclared fields")
        finally:
            browser.screenshot(ARTIFACTS / "dagster-schema-drift.png")

    # evolve from Dagster: the proposal, tried on the rescued records, recorded as an edit
    status, events = wait_for_run(base, launch(base, "evolve_asset", {"ops": {"evolve_declaration": {"config": {
        "asset": NARROW_ASSET, "apply": True, "who": "ana@example.com"}}}}), timeout=420)
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    shown = {m["label"] for e in events if e.get("stepKey") == "evolve_declaration"
             and e["__typename"] == "ExecutionStepOutputEvent" for m in e["metadataEntries"]}
    assert {"fields", "sample", "proposed"} <= shown, shown
    from kappa.delta.declarations import Declarations

    evolved = Declarations(settings).active()[NARROW_ASSET].yaml
    for name, kind in UNDECLARED.items():
        assert f"{name}: {kind}  # added by kappa declarations evolve" in evolved, (name, evolved)

    # the replay job builds v2 from the log with every field, and promotes it
    status, events = wait_for_run(base, launch(base, "replay", {"ops": {"replay_asset": {"config": {
        "asset": NARROW_ASSET, "promote": True}}}}), timeout=420)
    assert status == "SUCCESS", [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    v2 = Registry(settings).promoted(NARROW_ASSET)
    assert v2 is not None and v2.version == 2
    rows = table(settings, NARROW_ASSET, 2).set_index("event_id").sort_index()
    # the producer's values, as the full silver declaration (the promoted flights) parsed them
    expected = table(settings, "flights", Registry(settings).promoted("flights").version).set_index("event_id").sort_index()
    assert len(rows) == len(expected) == SLICE and set(UNDECLARED) <= set(rows.columns)
    for name in ("dep_delay", "tailnum", "distance", "arr_time"):
        pd.testing.assert_series_equal(rows[name], expected[name], check_dtype=False, check_names=False)
    assert rescued_fields(settings, NARROW_ASSET, 2) == {} and len(rescued_fields(settings, NARROW_ASSET, 1)) == len(UNDECLARED)

    status, events = wait_for_run(base, launch(base, "retire_asset", {"ops": {"retire_declaration": {"config": {
        "asset": NARROW_ASSET, "who": "ana@example.com", "reason": "the walkthrough is over"}}}}))
    assert status == "SUCCESS", events
