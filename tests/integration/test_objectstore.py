"""`kappa objectstore` as a user runs it: a real S3-compatible server (versitygw, built by
`make objectstore-tools`), started and stopped by the CLI in a subprocess, then used by delta-rs,
pyarrow and Spark's S3A connector through nothing but the `env` its status prints."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import REPO, free_port
from ..kappa_cli import run_kappa
from .helpers import object_store

pytestmark = [pytest.mark.integration, pytest.mark.objectstore]



def kappa(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return run_kappa(*args, env=env, timeout=timeout)


def python(script: str, env: dict[str, str], timeout: float = 60) -> str:
    """Run ``script`` in a fresh interpreter with exactly ``env``; its stdout, or fail with its output."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def store(tmp_path):
    """(base env, status JSON) of a started object store in a private KAPPA_HOME on a free port;
    stopped afterwards. The base env carries no AWS_* variable, so credentials come from the store."""
    with object_store(tmp_path / "home", "kappa-test") as started:
        yield started


def test_start_status_delta_rs_pyarrow_if_none_match_stop(store, tmp_path):
    base, st = store
    port = base["KAPPA_OBJECTSTORE_PORT"]
    assert st["up"] is True
    assert st["endpoint"] == f"http://127.0.0.1:{port}" and st["bucket"] == "kappa-test" and st["region"] == "us-east-1"
    env = st["env"]
    assert env["KAPPA_WAREHOUSE"] == "s3a://kappa-test/warehouse"
    assert env["KAPPA_CHECKPOINTS"] == "s3a://kappa-test/checkpoints"
    assert env["KAPPA_S3_ENDPOINT"] == st["endpoint"]
    assert env["AWS_REGION"] == "us-east-1" and env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    # generated at the first start, kept private
    creds = Path(st["credentials_file"])
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert env["AWS_SECRET_ACCESS_KEY"] in creds.read_text()

    # delta-rs writes and reads a table, pyarrow.fs (through kappa.core.storage) lists its log,
    # with only the printed env on top of the base
    out = python("""
        import json
        import pyarrow as pa
        from deltalake import DeltaTable, QueryBuilder, write_deltalake
        from kappa.config import load_settings
        from kappa.core import storage

        settings = load_settings()
        table = storage.join(settings.warehouse, "trips")
        write_deltalake(storage.delta_rs_uri(table), pa.table({"id": [1, 2], "city": ["a", "b"]}))
        write_deltalake(storage.delta_rs_uri(table), pa.table({"id": [3], "city": ["c"]}), mode="append")
        dt = DeltaTable(storage.delta_rs_uri(table))
        # delta-rs's own query engine reads the data (to_pyarrow_table's file handler can abort the
        # process at exit: kappa.delta.tables)
        ids = QueryBuilder().register("trips", dt).execute("SELECT id FROM trips").read_all().column("id")
        print(json.dumps({"version": dt.version(), "ids": sorted(ids.to_pylist()),
                          "log": storage.list_names(storage.join(table, "_delta_log"), settings)}))
    """, {**base, **env})
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"version": 1, "ids": [1, 2, 3],
                   "log": ["00000000000000000000.json", "00000000000000000001.json"]}
    # the objects are files under the store's data folder (one folder per bucket)
    assert (Path(st["data_dir"]) / "kappa-test" / "warehouse" / "trips" / "_delta_log").is_dir()

    # Kappa's own delta-rs tables (the registry here) reach the store from KAPPA_S3_ENDPOINT alone,
    # without the AWS SDK's endpoint variables
    kappa_only = {k: v for k, v in env.items() if k not in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP")}
    out = python("""
        from kappa.config import load_settings
        from kappa.delta.registry import Registry

        registry = Registry(load_settings())
        registry.record("trips", 1, "created", note="on the object store")
        print(registry.path, [e["event"] for e in registry.events("trips")])
    """, {**base, **kappa_only})
    assert out.split() == ["s3a://kappa-test/warehouse/_kappa/registry", "['created']"]

    # PutObject with If-None-Match: * creates a key once, then answers 412 and keeps the first body
    curl = shutil.which("curl")
    if curl is not None:
        url = f"{st['endpoint']}/kappa-test/conditional/key"
        sign = ["--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3",
                "--user", f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        codes = []
        for body in ("first", "second"):
            put = subprocess.run([curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", *sign, "-H", "If-None-Match: *",
                                  "-X", "PUT", "--data-binary", body, url], capture_output=True, text=True, timeout=30)
            codes.append(put.stdout)
        get = subprocess.run([curl, "-s", *sign, url], capture_output=True, text=True, timeout=30)
        assert codes == ["200", "412"] and get.stdout == "first"

    stopped = kappa("objectstore", "stop", env=base)
    assert stopped.returncode == 0, stopped.stderr
    after = json.loads(kappa("objectstore", "status", "--format", "json", env=base).stdout)
    assert after["up"] is False and after["pid"] is None
    # a second start keeps the objects and the credentials
    again = kappa("objectstore", "start", env=base)
    assert again.returncode == 0, again.stderr
    assert json.loads(kappa("objectstore", "status", "--format", "json", env=base).stdout)["env"] == env
    assert (Path(st["data_dir"]) / "kappa-test" / "warehouse" / "trips" / "_delta_log").is_dir()


def _as_endpoint(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the SQL endpoint's keys as ``AWS_*``: what `kappa serve` starts the endpoint with."""
    return {**env, "AWS_ACCESS_KEY_ID": env["KAPPA_SERVE_AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": env["KAPPA_SERVE_AWS_SECRET_ACCESS_KEY"]}


def test_delete_tree_removes_a_nested_folder_that_delete_dir_leaves_behind(store):
    # a checkpoint's shape: files beside and under folders; `kappa forget` deletes whole checkpoints
    base, st = store
    out = python("""
        import json
        from kappa.config import load_settings
        from kappa.core.storage import delete_tree, exists, filesystem
        settings = load_settings()
        root = load_settings().checkpoints + "/flights/v1"
        fs, path = filesystem(root, settings)
        keys = ["metadata", "sources/0/0"] + [f"{d}/{b}" for d in ("offsets", "commits") for b in range(40)]
        keys += [f"state/0/{p}/{b}.changelog" for p in range(4) for b in range(1, 41)]
        for d in ("sources", "state", "state/0", *(f"state/0/{p}" for p in range(4))):  # markers, as S3A's mkdirs
            fs.create_dir(path + "/" + d)
        for key in keys:
            with fs.open_output_stream(path + "/" + key) as f:
                f.write(b"x")
        got = {"files": delete_tree(root, settings), "exists": exists(root, settings),
               "again": delete_tree(root, settings)}
        print(json.dumps(got))
    """, {**base, **st["env"]})
    assert json.loads(out.strip().splitlines()[-1]) == {"files": 242, "exists": False, "again": 0}


@pytest.mark.spark
def test_spark_writes_and_reads_a_delta_table_at_s3a(store):
    base, st = store
    out = python("""
        import json
        from kappa.config import load_settings
        from kappa.core import storage
        from kappa.streaming.session import spark_session

        settings = load_settings(spark_master="local[1]", spark_driver_memory="1g")
        spark = spark_session(settings)
        path = storage.join(settings.warehouse, "spark_table")
        spark.range(5).write.format("delta").save(path)
        spark.range(5, 8).write.format("delta").mode("append").save(path)
        ids = sorted(r.id for r in spark.read.format("delta").load(path).collect())
        spark.stop()
        print(json.dumps({"path": path, "ids": ids,
                          "log": storage.list_names(storage.join(path, "_delta_log"), settings)}))
    """, {**base, **st["env"]}, timeout=240)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["path"] == "s3a://kappa-test/warehouse/spark_table"
    assert got["ids"] == list(range(8))
    assert "00000000000000000001.json" in got["log"]

    # With the SQL endpoint's keys (KAPPA_SERVE_AWS_*, issue 23 item 1) the same Spark configuration reads
    # the table and writes a Delta table in dbt's location, but cannot append to the table.
    out = python("""
        import json
        from kappa.config import load_settings
        from kappa.core import storage
        from kappa.streaming.session import spark_session

        settings = load_settings(spark_master="local[1]", spark_driver_memory="1g")
        spark = spark_session(settings)
        path = storage.join(settings.warehouse, "spark_table")
        ids = sorted(r.id for r in spark.read.format("delta").load(path).collect())
        try:
            spark.range(8, 9).write.format("delta").mode("append").save(path)
            append = "allowed"
        except Exception as err:
            append = "AccessDenied" if "AccessDenied" in str(err) else str(err)[:300]
        mart = storage.join(settings.warehouse, "_dbt", "a_mart")
        spark.range(3).write.format("delta").save(mart)
        mart_rows = spark.read.format("delta").load(mart).count()
        spark.stop()
        print(json.dumps({"ids": ids, "append": append, "mart_rows": mart_rows}))
    """, {**base, **_as_endpoint(st["env"])}, timeout=240)
    assert json.loads(out.strip().splitlines()[-1]) == {"ids": list(range(8)), "append": "AccessDenied", "mart_rows": 3}


def test_the_sql_endpoints_identity_reads_the_warehouse_and_writes_only_dbts_location(store):
    """Issue 23 item 1: the keys in ``KAPPA_SERVE_AWS_*`` (the SQL endpoint's account) read every object
    under the warehouse and write only under ``warehouse/_dbt/``; the registry, the tables and the
    checkpoints refuse them (the server answers AccessDenied), whatever statement reached the store."""
    base, st = store
    env = st["env"]
    serve = _as_endpoint(env)
    assert serve["AWS_ACCESS_KEY_ID"] != env["AWS_ACCESS_KEY_ID"]
    creds = Path(st["credentials_file"]).with_name("serve-credentials")
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600 and serve["AWS_SECRET_ACCESS_KEY"] in creds.read_text()
    out = python("""
        import json, os
        import pyarrow.fs as pafs

        def fs(prefix):
            return pafs.S3FileSystem(access_key=os.environ[prefix + "AWS_ACCESS_KEY_ID"],
                                     secret_key=os.environ[prefix + "AWS_SECRET_ACCESS_KEY"], region="us-east-1",
                                     endpoint_override=os.environ["AWS_ENDPOINT_URL"][len("http://"):], scheme="http",
                                     allow_bucket_creation=True)

        root, serve, b = fs("ROOT_"), fs(""), "kappa-test"
        log = f"{b}/warehouse/_kappa/registry/_delta_log/00000000000000000000.json"
        table = f"{b}/warehouse/flights/v1/part-0.parquet"
        offsets = f"{b}/checkpoints/flights/v1/offsets/0"
        for key in (log, table, offsets):
            with root.open_output_stream(key) as f:
                f.write(b"root's")

        def attempt(f):
            try:
                f()
                return "allowed"
            except OSError as err:
                return "AccessDenied" if "ACCESS_DENIED" in str(err) else str(err)[:200]

        def write(key):
            with serve.open_output_stream(key) as f:
                f.write(b"endpoint's")

        def read(key):
            with serve.open_input_stream(key) as f:
                assert f.read() in (b"root's", b"endpoint's")

        dbt = f"{b}/warehouse/_dbt/departures_by_carrier/part-0.parquet"
        got = {
            "read the registry": attempt(lambda: read(log)),
            "read a table": attempt(lambda: read(table)),
            "list the warehouse": attempt(lambda: serve.get_file_info(pafs.FileSelector(f"{b}/warehouse", recursive=True))),
            "append to the registry": attempt(lambda: write(log.replace("0.json", "1.json"))),
            "overwrite the registry": attempt(lambda: write(log)),
            "delete the registry": attempt(lambda: serve.delete_file(log)),
            "overwrite a table": attempt(lambda: write(table)),
            "delete a table": attempt(lambda: serve.delete_file(table)),
            "read a checkpoint": attempt(lambda: read(offsets)),
            "write a checkpoint": attempt(lambda: write(offsets)),
            "create a bucket": attempt(lambda: serve.create_dir("another-bucket")),
            "write dbt's location": attempt(lambda: write(dbt)),
            "read dbt's location": attempt(lambda: read(dbt)),
            "delete in dbt's location": attempt(lambda: serve.delete_file(dbt)),
        }
        with root.open_input_stream(log) as f:
            got["registry after"] = f.read().decode()
        print(json.dumps(got))
    """, {**base, **serve, "ROOT_AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
          "ROOT_AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]})
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {
        "read the registry": "allowed", "read a table": "allowed", "list the warehouse": "allowed",
        "append to the registry": "AccessDenied", "overwrite the registry": "AccessDenied",
        "delete the registry": "AccessDenied", "overwrite a table": "AccessDenied", "delete a table": "AccessDenied",
        "read a checkpoint": "AccessDenied", "write a checkpoint": "AccessDenied", "create a bucket": "AccessDenied",
        "write dbt's location": "allowed", "read dbt's location": "allowed", "delete in dbt's location": "allowed",
        "registry after": "root's",
    }, got


@pytest.mark.broker
@pytest.mark.spark
def test_assets_run_with_tables_checkpoints_and_registry_on_the_object_store(store, tmp_path):
    """Issue 20 item 2, Spark side: `kappa run` with the printed env keeps every table, checkpoint
    and the registry at s3a://<bucket>/…; a second run restarts from those checkpoints and adds
    nothing (exactly once across the restart)."""
    base, st = store
    env = {**base, **st["env"], "KAPPA_KAFKA_PORT": str(free_port()), "KAPPA_KAFKA_CONTROLLER_PORT": str(free_port()),
           "KAPPA_SPARK_MASTER": "local[2]", "KAPPA_SPARK_DRIVER_MEMORY": "1g"}
    assert kappa("kafka", "start", env=env, timeout=180).returncode == 0
    try:
        assert kappa("ingest", "nycflights13", "--limit", "500", env=env, timeout=300).returncode == 0
        read = """
            import json
            from kappa.config import load_settings
            from kappa.delta.registry import Registry
            from kappa.delta.tables import dataset  # not delta-rs's file handler: see its module

            settings = load_settings()
            out = {}
            for asset in ("weather_bronze", "weather"):
                v = Registry(settings).latest(asset)
                out[asset] = [v.table_path, v.checkpoint_path, dataset(v.table_path, settings).count_rows()]
            print(json.dumps(out))
        """
        for _ in range(2):
            run = kappa("run", "weather_bronze", "weather", "--until-caught-up", env=env, timeout=600)
            assert run.returncode == 0, run.stdout + run.stderr
            got = json.loads(python(read, env).strip().splitlines()[-1])
            for asset, (table, checkpoint, rows) in got.items():
                assert table == f"s3a://kappa-test/warehouse/{asset}/v1"
                assert checkpoint == f"s3a://kappa-test/checkpoints/{asset}/v1"
                assert rows == 500, asset
        assert (Path(st["data_dir"]) / "kappa-test" / "checkpoints" / "weather" / "v1" / "commits").is_dir()

        # Issue 45 on the object store: retention deletes the start of `weather` from the broker;
        # its archive, weather_bronze/v1 at s3a://, holds it, and a replay reads archive + log.
        starts = json.loads(python("""
            import json, time
            from kappa.config import load_settings
            from kappa.kafka.topics import alter_topic_config, offsets

            settings = load_settings()
            alter_topic_config(settings, "weather", {"retention.ms": "1000", "segment.ms": "100"})
            deadline = time.monotonic() + 60
            while not any(p.start > 0 for p in offsets(settings, ["weather"])):
                assert time.monotonic() < deadline, "retention never deleted a segment"
                time.sleep(1)
            alter_topic_config(settings, "weather", {"retention.ms": "-1"})
            print(json.dumps({p.partition: p.start for p in offsets(settings, ["weather"])}))
        """, env, timeout=120).strip().splitlines()[-1])
        assert any(starts.values())
        replayed = kappa("replay", "weather", "--promote", env=env, timeout=600)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        parts = ", ".join(f"[{p}] 0-{s - 1}" for p, s in starts.items() if s > 0)
        assert (f"weather/v2 reads weather {parts} from its archive weather_bronze/v1, the rest from Kafka"
                in " ".join(replayed.stdout.split()))
        v2 = json.loads(python(read.replace('("weather_bronze", "weather")', '("weather",)').replace(
            "latest(asset)", "promoted(asset)"), env).strip().splitlines()[-1])["weather"]
        assert v2[0] == "s3a://kappa-test/warehouse/weather/v2" and v2[2] == 500
    finally:
        kappa("kafka", "stop", env=env)
