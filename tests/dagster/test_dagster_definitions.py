"""The Dagster code location loads every YAML in assets/, and only valid ones.

No broker or Spark here: loading definitions must not need them. (This folder has no __init__.py on
purpose: a regular package named ``dagster`` under tests/ could shadow the real one on sys.path.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kappa.dagster.component import HEALTH_CHECK, StreamingAssets, topic_key
from kappa.dagster.definitions import build_definitions
from kappa.streaming.checkpoint import read_checkpoint
from kappa.spec import SpecError, load_catalog
from kappa.spec.catalog import nested_projects

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"


def snapshot_of(defs: dg.Definitions) -> dict:
    """Asset keys with group, kinds, owners, deps and check names: what a reviewer sees in the UI."""
    graph = defs.get_repository_def().asset_graph
    out: dict = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        checks = sorted(ck.name for ck in graph.asset_check_keys if ck.asset_key == key)
        out[key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "owners": list(node.owners),
            "deps": sorted(d.to_user_string() for d in node.parent_keys),
            "checks": checks,
        }
    return out


def test_definitions_load_every_yaml_in_assets():
    defs = build_definitions(REPO / "assets")
    dg.Definitions.validate_loadable(defs)
    catalog = load_catalog(REPO / "assets")
    keys = {k.to_user_string() for k in defs.get_repository_def().asset_graph.get_all_asset_keys()}
    read = {t for name in catalog.assets for t in catalog[name].topics}  # declared topics some asset reads
    dbt_nodes = {"nycflights13_airlines", "stg_kappa__flights", "stg_kappa__weather", "stg_nycflights13__airlines",
                 "carrier_daily_performance", "origin_daily_weather_delays"}
    assert keys == set(catalog.assets) | {f"topic/{t}" for t in read} | dbt_nodes
    # every YAML file but topics and connectors, less those of another project (assets/nexmark)
    projects = nested_projects(REPO / "assets")
    files = [p for p in (REPO / "assets").rglob("*.yaml") if not any(d in p.parents for d in projects)]
    assert projects and len(files) - 2 == len(catalog.assets)
    repo = defs.get_repository_def()
    assert repo.has_job("replay") and repo.has_job("maintain") and repo.has_job("advance")
    [schedule] = repo.schedule_defs
    assert (schedule.name, schedule.job_name, schedule.cron_schedule) == ("kappa_maintain", "maintain", "0 3 * * *")
    assert sorted(s.name for s in repo.sensor_defs) == ["kappa_advance", "kappa_archives", "kappa_automation",
                                                        "kappa_registry", "kappa_streaming_queries"]
    assert repo.get_sensor_def("kappa_advance").default_status == dg.DefaultSensorStatus.STOPPED  # no continuous asset


def test_snapshot_of_asset_keys_groups_and_check_names():
    """Regenerate after an intended change: KAPPA_UPDATE_SNAPSHOTS=1 pytest tests/dagster -k snapshot"""
    actual = snapshot_of(build_definitions(REPO / "assets"))
    if os.environ.get("KAPPA_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert actual == json.loads(SNAPSHOT.read_text())


def test_every_gate_check_is_blocking_and_health_is_not():
    from kappa.quality.gate import check_names

    defs = build_definitions(REPO / "assets")
    graph = defs.get_repository_def().asset_graph
    catalog = load_catalog(REPO / "assets")
    for spec in catalog:
        declared = check_names(spec)
        assert "shadow_diff" in declared and len(declared) > 1, spec.name
        for name in declared:
            assert graph.get_check_spec(dg.AssetCheckKey(dg.AssetKey(spec.name), name)).blocking, (spec.name, name)
        assert not graph.get_check_spec(dg.AssetCheckKey(dg.AssetKey(spec.name), HEALTH_CHECK)).blocking
    assert "quarantine_rate" in check_names(catalog["flights"])


def test_lineage_topics_are_source_assets_and_upstream_assets_are_deps():
    graph = build_definitions(REPO / "assets").get_repository_def().asset_graph
    flights = graph.get(dg.AssetKey("flights"))
    assert flights.parent_keys == {topic_key("flights")}
    assert graph.get(topic_key("flights")).is_external
    assert not graph.get(topic_key("flights")).is_materializable
    gold = graph.get(dg.AssetKey("departures_hourly"))
    assert gold.parent_keys == {dg.AssetKey("flights")}
    assert gold.kinds == {"spark", "delta"} and flights.kinds == {"kafka", "spark", "delta"}
    assert gold.owners == ["team:analytics"] and gold.group_name == "flights"
    assert "tumbling" in gold.description.lower()


def _copy_assets(dest: Path) -> Path:
    shutil.copytree(REPO / "assets", dest)
    return dest


def readme_example() -> str:
    """The worked example of README.md: the yaml block starting `name: `."""
    text = (REPO / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    [example] = [b for b in blocks if b.startswith("name: ")]
    return example


def test_a_new_yaml_in_a_temporary_folder_appears_as_an_asset(tmp_path):
    """The README's worked example, dropped into a copy of assets/, becomes an asset with its
    group, owner, kinds, lineage and checks."""
    assets = _copy_assets(tmp_path / "assets")
    (assets / "flights" / "delays_by_carrier.yaml").write_text(readme_example())
    defs = build_definitions(assets)
    dg.Definitions.validate_loadable(defs)
    graph = defs.get_repository_def().asset_graph
    node = graph.get(dg.AssetKey("delays_by_carrier"))
    assert node.group_name == "flights" and node.owners == ["team:analytics"]
    assert node.kinds == {"spark", "delta"}
    assert node.parent_keys == {dg.AssetKey("flights")}
    assert node.description == "Mean departure delay and flight count per carrier per UTC day."
    checks = {ck.name: graph.get_check_spec(ck).blocking for ck in graph.asset_check_keys if ck.asset_key == node.key}
    assert checks.pop(HEALTH_CHECK) is False
    assert {"expect_column_values_to_not_be_null__carrier", "expect_compound_columns_to_be_unique__carrier_window_start",
            "expect_table_row_count_to_be_between", "shadow_diff"} <= set(checks)
    assert all(checks.values())
    # the repo's own folder is untouched
    repo_keys = build_definitions(REPO / "assets").get_repository_def().asset_graph.get_all_asset_keys()
    assert dg.AssetKey("delays_by_carrier") not in repo_keys


def _break(assets: Path) -> Path:
    path = assets / "flights" / "departures_hourly.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["transform"]["window"]["size"] = "soon"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_broken_yaml_fails_at_load_naming_file_and_field(tmp_path):
    path = _break(_copy_assets(tmp_path / "assets"))
    with pytest.raises(SpecError) as err:
        build_definitions(tmp_path / "assets")
    assert str(path) in str(err.value) and "transform.window.size" in str(err.value)


def test_a_bad_owner_or_unknown_continuous_asset_fails_at_load(tmp_path):
    assets = _copy_assets(tmp_path / "assets")
    with pytest.raises(SpecError, match="continuous: unknown assets \\['nope'\\]"):
        StreamingAssets(assets_dir=str(assets), continuous=["nope"])
    path = assets / "weather" / "weather.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["owner"] = "somebody"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(SpecError, match=f"{path}: owner: 'somebody'"):
        StreamingAssets(assets_dir=str(assets))


def test_the_component_reads_its_attributes_from_yaml(tmp_path):
    assets = _copy_assets(tmp_path / "assets")
    component = StreamingAssets.resolve_from_yaml(
        f"assets_dir: {assets}\ncontinuous: [flights]\nstall_after_s: 60\n"
    )
    assert component.continuous == ["flights"] and component.stall_after_s == 60
    assert component.check_names("flights")[-1] == "shadow_diff"


def _cli_validate(assets: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KAPPA_ASSETS_DIR": str(assets), "DAGSTER_HOME": str(tmp_path / "dh")}
    (tmp_path / "dh").mkdir(exist_ok=True)
    return subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # loads dagster, dagster-dbt and the dbt manifest


def test_dagster_cli_from_repo_root_validates_and_reports_a_broken_file(tmp_path):
    """`dagster definitions validate` with no arguments finds the code location in pyproject.toml."""
    ok = _cli_validate(REPO / "assets", tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "Validation successful for code location kappa" in ok.stdout + ok.stderr
    path = _break(_copy_assets(tmp_path / "assets"))
    bad = _cli_validate(tmp_path / "assets", tmp_path)
    assert bad.returncode != 0
    assert str(path) in bad.stdout + bad.stderr and "transform.window.size" in bad.stdout + bad.stderr


def test_read_checkpoint_takes_offsets_of_the_newest_committed_batch(tmp_path):
    cp = tmp_path / "cp"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    for batch, offsets in ((0, {"t": {"0": 5, "1": 7}}), (1, {"t": {"0": 9, "1": 7}}), (2, {"t": {"0": 12, "1": 8}})):
        (cp / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps(offsets)}\n")
    (cp / "offsets" / ".2.crc").write_text("x")
    for batch in (0, 1):  # batch 2 is planned, not committed
        (cp / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    state = read_checkpoint(cp)
    assert state.batch_id == 1 and state.planned_batch_id == 2
    assert state.offsets == {"t": {"0": 9, "1": 7}}
    assert state.committed_at is not None
    assert read_checkpoint(tmp_path / "missing").offsets == {}


def test_the_maintain_job_runs_the_library_and_returns_its_report(tmp_path):
    """The `maintain` job on an empty warehouse: the library's report of every shared table (none
    exists yet, so no Spark is started); an undeclared asset is not a valid config.

    Issue 40's attack: `retention_hours: 0.0001` from the UI wiped time travel. It is refused below
    the platform floor (168 h) and nothing is recorded; a retention of its own at or above the floor
    only records a request, which `kappa approve` runs, recording the approver and the outcome."""
    from kappa.dagster.maintain import build_maintain_job
    from kappa.dagster.resources import KappaResource

    component = StreamingAssets(assets_dir=str(REPO / "assets"))
    job = build_maintain_job(component.catalog, component.options)
    result = job.execute_in_process(resources={"kappa": KappaResource(home=str(tmp_path))},
                                    run_config={"ops": {"maintain_tables": {"config": {"assets": ["flights"]}}}})
    assert result.success
    report = result.output_for_node("maintain_tables")
    assert [t["table"] for t in report["tables"]] == ["_kappa/quarantine", "_kappa/late_events", "_kappa/rescued",
                                                      "_kappa/registry", "_kappa/forgotten", "_kappa/alerts"]
    with pytest.raises(dg.DagsterInvalidConfigError):
        job.execute_in_process(resources={"kappa": KappaResource(home=str(tmp_path))},
                               run_config={"ops": {"maintain_tables": {"config": {"assets": ["no_such_asset"]}}}})

    from kappa.delta.registry import REQUESTS, Registry

    def launch(**config):
        return job.execute_in_process(resources={"kappa": KappaResource(home=str(tmp_path))}, raise_on_error=False,
                                      run_config={"ops": {"maintain_tables": {"config": config}}})

    settings = KappaResource(home=str(tmp_path)).settings(assets_dir=str(REPO / "assets"))
    refused = launch(retention_hours=0.0001, requested_by="mallory")
    failure = next(e for e in refused.all_events if e.is_step_failure)
    assert "at least the platform floor of 168 hours" in failure.step_failure_data.user_failure_data.description
    assert Registry(settings).events(REQUESTS) == []
    asked = launch(assets=["flights"], retention_hours=200.0, requested_by="ana")
    assert asked.success and asked.output_for_node("maintain_tables")["state"] == "pending"
    rid = asked.output_for_node("maintain_tables")["request_id"]
    assert [e["event"] for e in Registry(settings).events(REQUESTS)] == ["requested"]  # nothing ran
    # `kappa approve` (the command, in process) runs it: the verified approver (the OS user, not
    # $USER) and the outcome are recorded
    import pwd

    from typer.testing import CliRunner

    from kappa.cli.app import app

    env = {"KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(tmp_path), "USER": "someone-else",
           "LOGNAME": "someone-else"}
    done = CliRunner().invoke(app, ["approve", rid], env=env)
    assert done.exit_code == 0 and f"request {rid} done" in done.output, done.output
    events = Registry(settings).events(REQUESTS)
    assert [e["event"] for e in events] == ["requested", "approved", "request_done"]
    assert events[0]["details"]["claimed_by"] == "ana" and events[0]["details"]["params"]["retention_hours"] == 200.0
    assert events[1]["details"]["approver"]["user"] == pwd.getpwuid(os.geteuid()).pw_name != "someone-else"
    assert events[2]["details"]["outcome"]["retention_hours"] == 200.0
    listed = CliRunner().invoke(app, ["requests", "--format", "json"], env=env)
    assert [(r["request_id"], r["state"]) for r in json.loads(listed.output)] == [(rid, "done")]
    again = CliRunner().invoke(app, ["approve", rid], env=env)
    assert again.exit_code == 1 and f"request {rid} is done" in again.output and "Traceback" not in again.output


def test_the_advance_sensor_runs_by_default_with_continuous_assets_and_the_job_moves_nothing_when_empty(tmp_path):
    """`advance` (kappa.lifecycle.cut.advance): its sensor runs by default only when the component
    declares continuous assets; on an empty warehouse the job moves nothing."""
    from kappa.dagster.advance import build_advance_job, build_advance_sensor
    from kappa.dagster.resources import KappaResource

    component = StreamingAssets(assets_dir=str(REPO / "assets"))
    continuous = StreamingAssets(assets_dir=str(REPO / "assets"), continuous=["flights"])
    sensor = build_advance_sensor(build_advance_job(continuous.catalog, continuous.options), continuous.options)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    result = build_advance_job(component.catalog, component.options).execute_in_process(
        resources={"kappa": KappaResource(home=str(tmp_path))})
    assert result.success and result.output_for_node("advance_cut") == {"pins": {}, "moved": {}, "refused": {},
                                                                         "unverified": {}, "held_back": {}}
    # a promoted version without a table: its pin is not evaluated, and the run's output says why
    from kappa.delta.registry import Registry

    registry = Registry(KappaResource(home=str(tmp_path)).settings(assets_dir=str(REPO / "assets")))
    registry.create_version("flights", "f", {})
    registry.promote({"flights": 1})
    result = build_advance_job(component.catalog, component.options).execute_in_process(
        resources={"kappa": KappaResource(home=str(tmp_path))})
    why = "flights/v1: consistency not evaluated: no table yet"
    assert result.success and result.output_for_node("advance_cut")["unverified"]["flights"].startswith(why)
    [output] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.event_specific_data.metadata["unverified"].data["flights"].startswith(why)


def test_a_run_config_cannot_choose_the_image_the_tables_or_the_dbt_executable(tmp_path):
    """Issue 23: whoever can launch a run (the launchpad) could set any field of a resource from
    run config: the kubernetes runner's image and service account, the warehouse, dbt's executable.
    The code location binds its resources sealed, so such a run is refused before it starts;
    without run config the same job runs (here: `maintain` on an empty warehouse)."""
    from kappa.dagster.resources import KappaResource

    defs = build_definitions(REPO / "assets", resource=KappaResource(home=str(tmp_path)))
    job = defs.get_job_def("maintain")
    ops = {"maintain_tables": {"config": {"assets": ["flights"]}}}
    for resource, config in (("kappa", {"kubernetes": {"image": "evil.example/miner:latest",
                                                       "service_account": "default"}}),
                             ("kappa", {"warehouse": str(tmp_path / "elsewhere")}),
                             ("dbt", {"dbt_executable": "/bin/sh"})):
        with pytest.raises(dg.DagsterInvalidConfigError,
                           match=f'unexpected config entry "{next(iter(config))}" at path root:resources:{resource}'):
            job.execute_in_process(run_config={"ops": ops, "resources": {resource: {"config": config}}})
    assert job.execute_in_process(run_config={"ops": ops}).success
    assert not (tmp_path / "elsewhere").exists()


LIFECYCLE_JOBS = {  # job -> (op, {config field: (required, default)}): the CLI twins' arguments and options
    "promote_version": ("promote_stable_name", {"asset": (True, None), "version": (True, None), "only": (False, False)}),
    "rollback": ("rollback_stable_names", {"asset": (True, None)}),
    "forget_key": ("request_forget", {"topic": (True, None), "key_sha256": (True, None), "reason": (True, None),
                                      "requested_by": (True, None), "truncate_log": (False, False)}),
}


def _op_config(job: dg.JobDefinition, op: str):
    ops = job.run_config_schema.config_type.fields["ops"].config_type
    return ops.fields[op].config_type.fields["config"].config_type


def test_promote_rollback_and_forget_are_jobs_with_the_cli_arguments_as_config(tmp_path):
    """`kappa promote ASSET VERSION [--only]`, `kappa rollback ASSET` and `kappa forget --topic --key
    --reason [--truncate-log]` as jobs of the code location, each option a described config field with
    the CLI's default. On an empty warehouse the library's refusal fails the step with its message."""
    from kappa.dagster.resources import KappaResource

    defs = build_definitions(REPO / "assets", resource=KappaResource(home=str(tmp_path)), dbt=False)
    for name, (op, fields) in LIFECYCLE_JOBS.items():
        job = defs.get_job_def(name)
        config = _op_config(job, op)
        assert {f: (config.fields[f].is_required,
                    config.fields[f].default_value if config.fields[f].default_provided else None)
                for f in config.fields} == fields, name
        assert all(f.description for f in config.fields.values()), name
        assert job.description and job.tags["kappa/kind"]
    for job, op, config, message in (
            ("promote_version", "promote_stable_name", {"asset": "flights", "version": 1}, "flights has no version v1"),
            ("rollback", "rollback_stable_names", {"asset": "flights"},
             "flights has never been promoted: nothing to roll back")):
        run = defs.get_job_def(job).execute_in_process(run_config={"ops": {op: {"config": config}}},
                                                       raise_on_error=False)
        failure = next(e for e in run.all_events if e.is_step_failure)
        assert failure.step_failure_data.user_failure_data.description == message


def test_forget_key_refuses_a_missing_or_empty_reason_before_anything_runs(tmp_path):
    """A run without a reason does not launch; an empty or blank reason, a key that is not a
    SHA-256 (the key itself, say) or an unknown topic fails the step with one line, before
    anything is recorded."""
    from kappa.dagster.resources import KappaResource
    from kappa.lifecycle.approval import requests

    resource = KappaResource(home=str(tmp_path))
    job = build_definitions(REPO / "assets", resource=resource, dbt=False).get_job_def("forget_key")
    digest = "ab" * 32

    def run(**config):
        return job.execute_in_process(run_config={"ops": {"request_forget": {"config": config}}},
                                      raise_on_error=False)

    with pytest.raises(dg.DagsterInvalidConfigError, match='Missing required config entry "reason"'):
        run(topic="flights", key_sha256=digest, requested_by="ana")
    for config, message in (({"reason": ""}, "reason must say why"), ({"reason": "  "}, "reason must say why"),
                            ({"key_sha256": "N14228"}, "key_sha256 must be the key's SHA-256 in 64 hex digits"),
                            ({"topic": "nope"}, "unknown topic 'nope'"), ({"requested_by": " "}, "requested_by must")):
        result = run(**{"topic": "flights", "key_sha256": digest, "reason": "test", "requested_by": "ana", **config})
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert message in failure.step_failure_data.user_failure_data.description, failure.step_failure_data
    assert requests(resource.settings()) == []  # nothing was recorded


def test_declaration_jobs_take_their_config_in_their_first_step_and_a_bad_one_names_the_field(tmp_path):
    """`add_asset`, `edit_asset` and `retire_asset` (kappa declarations add|edit|retire): one step takes
    the launchpad's config; a declaration that does not validate fails that step, naming the
    declaration and the field, and nothing is recorded."""
    from kappa.dagster.resources import KappaResource
    from kappa.delta.declarations import Declarations

    resource = KappaResource(home=str(tmp_path))
    defs = build_definitions(REPO / "assets", resource=resource, dbt=False)
    steps = {name: [n.name for n in defs.get_job_def(name).graph.nodes_in_topological_order]
             for name in ("add_asset", "edit_asset", "retire_asset")}
    assert steps == {"add_asset": ["validate_declaration", "analyze_declaration", "record_declaration",
                                   "reload_code_location"],
                     "edit_asset": ["validate_edit", "analyze_declaration", "record_edit", "reload_code_location"],
                     "retire_asset": ["retire_declaration", "reload_code_location"]}
    fields = _op_config(defs.get_job_def("edit_asset"), "validate_edit").fields
    assert set(fields) == {"declaration", "apply", "who", "reason", "expected_fingerprint"}
    assert fields["apply"].default_value is False and all(f.description for f in fields.values())
    bad = "name: late\nlayer: gold\nsource: {asset: flights}\ntransform: {sql: 'SELECT 1 FROM input', raw: {}}\n"
    run = defs.get_job_def("add_asset").execute_in_process(
        run_config={"ops": {"validate_declaration": {"config": {"declaration": bad, "apply": True}}}},
        raise_on_error=False)
    failure = next(e for e in run.all_events if e.is_step_failure)
    assert failure.step_key == "validate_declaration"
    assert failure.step_failure_data.user_failure_data.description.startswith(
        "declarations:late: transform: Value error, declare exactly one of")
    assert Declarations(resource.settings()).events() == []


@pytest.mark.parametrize("event", ["added", "edited"])
def test_a_change_the_code_location_cannot_load_is_withdrawn_by_the_reload_step(tmp_path, monkeypatch, event):
    """`reload_code_location` after `record_declaration` (added) or `record_edit` (edited): when the
    webserver does not reload the location with the change, the step fails with the reason and the
    change is withdrawn, so the location loads as before: an added declaration is retired, an
    edited one gets the text it replaced back (an ``edited`` event replacing the failed text)."""
    from kappa.dagster.resources import KappaResource
    from kappa.delta.declarations import Declarations, text_fingerprint
    from kappa.harness.env import free_port

    monkeypatch.setenv("KAPPA_DAGSTER_URL", f"http://127.0.0.1:{free_port()}")  # nothing answers there
    resource = KappaResource(home=str(tmp_path))
    defs = build_definitions(REPO / "assets", resource=resource, dbt=False)
    reload_op = defs.get_job_def("edit_asset").graph.node_named("reload_code_location").definition
    log = Declarations(resource.settings())
    old = "name: late\nlayer: gold\nsource: {asset: flights}\ntransform: {sql: 'SELECT event_id FROM input'}\n"
    new = old.replace("event_id", "event_id, carrier")
    log.record("late", "added", old, who="ana")
    if event == "edited":
        log.record("late", "edited", new, who="ana", replaces=text_fingerprint(old))
    failed = new if event == "edited" else old

    with dg.build_op_context(resources={"kappa": resource}) as context, \
            pytest.raises(dg.Failure, match="could not reload code location 'kappa'"):
        reload_op(context, {"asset": "late", "event": event, "fingerprint": text_fingerprint(failed)})
    last = log.events("late")[-1]
    assert last.reason.startswith("withdrawn: the code location failed to load: could not reload")
    assert last.replaces == text_fingerprint(failed)
    if event == "added":
        assert last.event == "retired" and log.active() == {}
    else:
        assert (last.event, last.yaml) == ("edited", old) and log.active()["late"].fingerprint == text_fingerprint(old)
