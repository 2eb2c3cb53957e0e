"""No lost commit with many writers on the object store (issue 20 item 3).

Kappa's shared Delta tables have many writers: ``_kappa/quarantine`` and ``_kappa/late_events`` take
rows from every asset version's Spark application (and forget deletes from them); the registry,
declarations and forget log are written with delta-rs by the CLI, Dagster and every gate
application. On S3 a commit is safe only if creating ``_delta_log/<version>.json`` is
put-if-absent across processes.

On a private versitygw (``kappa objectstore start``), writers in separate processes append a few
rows per commit to one shared table, the writers of a table committing at the same moments
(tests/concurrent_writer.py); every row of every commit that returned must then be in its table
exactly once, with one table version per commit:
- delta-rs (the registry's kind): three processes with Kappa's options (``conditional_put=etag``).
  The setting it replaced cannot lose a commit in delta-rs 1.x: without conditional puts every
  commit is refused (``AWS_S3_ALLOW_UNSAFE_RENAME`` no longer makes an unconditional copy), which
  the second test shows.
- Spark (quarantine's kind): two Spark applications, each a SparkSession of Kappa's
  ``spark_session`` with Kappa's log store, beside two delta-rs writers (2026-11-27, quiet machine:
  12 Spark commits, 12 versions, 36 rows found of 36; 24 delta-rs commits, 24 versions; 90 s).
- The log store alone (the step of a Delta commit that makes or loses it): two processes create
  versions 1-8 of one log at the same moments. Kappa's: 8 created, 8 refused, none lost; the one it
  replaced: both writers told they created 7 of the 8 (2026-11-27).
- The setting Kappa replaced through whole Spark appends: Delta's ``S3SingleDriverLogStore`` over
  S3A's unconditional creates, which loses a commit when two writers' existence checks both come
  before either's upload (separate requests, guarded only inside one JVM). Left to timing that was
  rare (1 commit of 12, 1 of 40 on 2026-11-27), so the test makes every round collide: a proxy
  (tests/s3_barrier.py) holds each upload of a ``<version>.json`` until both writers' have arrived.
  2026-11-28: 8 appends returned, 4 versions, 4 commits (12 rows) lost, one per round; Kappa's log
  store under the same barrier: 8 of 8, the second upload refused and retried as the next version.
  With S3A's conditional create left on, the replaced log store lost nothing either (12 of 12): its
  ``create(overwrite=false)`` is then a conditional PutObject as well, so the test switches both
  off, as they were before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO
from ..kappa_cli import run_kappa
from ..s3_barrier import CommitBarrier
from .helpers import object_store

pytestmark = [pytest.mark.integration, pytest.mark.objectstore]

#: Writers per table, commits per writer, rows per commit, seconds between a writer's commits.
#: Spark's period leaves room for one small append on a busy 2-core machine.
SPARK_WRITERS, DELTA_RS_WRITERS = 2, 2
SPARK_COMMITS, DELTA_RS_COMMITS, ROWS = 6, 12, 3
#: Rounds of the collision tests: each writer's commit k waits at the barrier for the other's.
COLLISIONS = 4
SPARK_PERIOD, DELTA_RS_PERIOD = 2.0, 0.4
#: The log-store race: versions each writer tries to create, and seconds between them.
RACE_COMMITS, RACE_PERIOD = 8, 1.0
#: Bounds: writers ready (Spark's JVMs started), then the whole run.
READY_S, RUN_S = 180.0, 120.0


def kappa(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_kappa(*args, env=env, timeout=60)


@pytest.fixture(scope="module")
def store_env(tmp_path_factory):
    """The environment of a private object store (started with the CLI on a free port, stopped
    afterwards): the base environment without AWS_*/KAPPA_* plus its status's ``env``."""
    with object_store(tmp_path_factory.mktemp("objectstore"), "writers") as (base, status):
        yield {**base, **status["env"]}


def _create(table: str, env: dict[str, str]) -> None:
    """An empty table (version 0) with the writers' schema, made with delta-rs in a fresh
    interpreter that has only ``env``."""
    script = f"""
import pyarrow as pa
from deltalake import write_deltalake
from kappa.config import load_settings
from kappa.core.storage import delta_rs_options, delta_rs_uri
schema = pa.schema([("writer", pa.string()), ("commit", pa.int32()), ("id", pa.string())])
write_deltalake(delta_rs_uri({table!r}), schema.empty_table(), storage_options=delta_rs_options({table!r}, load_settings()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr


def _read(table: str, env: dict[str, str]) -> dict:
    """The table's ids and latest version, read with delta-rs (safe options) in a fresh interpreter."""
    script = f"""
import json
from deltalake import DeltaTable, QueryBuilder
from kappa.config import load_settings
from kappa.core.storage import delta_rs_options, delta_rs_uri
dt = DeltaTable(delta_rs_uri({table!r}), storage_options=delta_rs_options({table!r}, load_settings()))
ids = QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all().column("id").to_pylist()
print(json.dumps({{"version": dt.version(), "ids": ids}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run(plan: list[tuple[str, str, str, int, float]], mode: str, env: dict[str, str], sync: Path) -> dict[str, dict]:
    """Start every writer of ``plan`` ((engine, writer, table, commits, period) each, in ``mode``) as
    its own process, wait until all are ready, give the go, and return writer -> its JSON report."""
    sync.mkdir()
    procs = {
        writer: subprocess.Popen([sys.executable, "-m", "tests.concurrent_writer", engine, mode, writer, table,
                                  str(sync), str(commits), str(ROWS), str(period)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        for engine, writer, table, commits, period in plan}
    results: dict[str, dict] = {}
    try:
        deadline = time.monotonic() + READY_S
        while not all((sync / f"{w}.ready").exists() for w in procs):
            exited = {w: p for w, p in procs.items() if p.poll() is not None}
            assert not exited, {w: p.communicate()[1][-2000:] for w, p in exited.items()}
            assert time.monotonic() < deadline, f"writers not ready after {READY_S:.0f} s"
            time.sleep(0.2)
        # written whole, then renamed: a writer polling for "go" never reads it half-written
        (sync / "go.partial").write_text(str(time.time() + 1.0))
        (sync / "go.partial").replace(sync / "go")
        for writer, proc in procs.items():
            out, err = proc.communicate(timeout=RUN_S)
            assert proc.returncode == 0, err[-3000:]
            results[writer] = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def run_log_store_race(mode: str, env: dict[str, str], sync: Path, writers: int = 2,
                       commits: int = RACE_COMMITS) -> dict:
    """Every writer creates commit files 1..``commits`` of one fresh ``_delta_log`` with the log store
    of ``mode`` (tests/concurrent_writer.py ``log-store``), all at the same moments; then count per
    version whose content is there and how many writers were told they created it: ``created``
    (writers told so, summed), ``versions``, ``lost`` (a writer told it created a version that holds
    another writer's content), ``refused`` (FileAlreadyExistsException, the put-if-absent's answer),
    ``other_failures``."""
    table = f"{env['KAPPA_WAREHOUSE']}/{sync.parent.name}/{mode}/_kappa/race"
    results = _run([("log-store", f"ls-{i}", table, commits, RACE_PERIOD) for i in range(writers)], mode, env, sync)
    script = f"""
import json
from kappa.config import load_settings
from kappa.core.storage import exists, read_text
settings = load_settings()
out = {{}}
for k in range(1, {commits} + 1):
    path = "{table}/_delta_log/" + f"{{k:020d}}.json"
    out[k] = json.loads(read_text(path, settings).splitlines()[0])["writer"] if exists(path, settings) else None
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    holder = {int(k): w for k, w in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    told = {k: [w for w, r in results.items() if k - 1 in r["committed"]] for k in holder}
    failures = [e for r in results.values() for e in r["failed"].values()]
    return {"created": sum(len(t) for t in told.values()), "versions": sum(1 for w in holder.values() if w),
            "lost": sum(len([w for w in t if w != holder[k]]) for k, t in told.items()),
            "refused": sum(1 for e in failures if "FileAlreadyExistsException" in e),
            "other_failures": [e for e in failures if "FileAlreadyExistsException" not in e],
            "holders": holder, "told": told}


def run_writers(mode: str, env: dict[str, str], sync: Path, spark_writers: int = SPARK_WRITERS,
                delta_rs_writers: int = DELTA_RS_WRITERS, spark_commits: int = SPARK_COMMITS,
                writers_env: dict[str, str] | None = None) -> dict[str, dict]:
    """Create the two shared tables under ``<warehouse>/<test>/<mode>/_kappa/`` (``<test>``: the
    folder holding ``sync``, one per test), run every writer in
    ``mode`` (with ``writers_env`` when given: the tables are created and read with ``env``), and count per table: rows appended (by commits that returned), rows found, ids found
    more than once or never appended, commits that returned, versions the table has after its
    empty version 0, commits lost (a commit that returned but whose rows are not all there)."""
    root = f"{env['KAPPA_WAREHOUSE']}/{sync.parent.name}/{mode}/_kappa"  # the store is the module's: a folder per test
    tables = {"spark": f"{root}/quarantine", "delta-rs": f"{root}/registry"}
    if not spark_writers:
        del tables["spark"]
    if not delta_rs_writers:
        del tables["delta-rs"]
    for table in tables.values():
        _create(table, env)
    plan = [("spark", f"spark-{i}", spark_commits, SPARK_PERIOD) for i in range(spark_writers)]
    plan += [("delta-rs", f"rs-{i}", DELTA_RS_COMMITS, DELTA_RS_PERIOD) for i in range(delta_rs_writers)]
    results = _run([(engine, writer, tables[engine], commits, period) for engine, writer, commits, period in plan],
                   mode, writers_env or env, sync)
    counts = {}
    for engine, table in tables.items():
        mine = [r for r in results.values() if r["engine"] == engine]
        appended = [f"{r['writer']}-{k}-{j}" for r in mine for k in r["committed"] for j in range(ROWS)]
        found = _read(table, env)
        ids = found["ids"]
        lost_commits = {(r["writer"], k) for r in mine for k in r["committed"]
                        if any(f"{r['writer']}-{k}-{j}" not in set(ids) for j in range(ROWS))}
        counts[engine] = {
            "rows_appended": len(appended), "rows_found": len(ids), "rows_lost": len(set(appended) - set(ids)),
            "duplicates": len(ids) - len(set(ids)), "unexpected": len(set(ids) - set(appended)),
            "commits": sum(len(r["committed"]) for r in mine), "versions": found["version"],
            "commits_lost": len(lost_commits),
            "failed": {r["writer"]: r["failed"] for r in mine if r["failed"]},
            "seconds": max(r["seconds"] for r in mine)}
    return counts


def _assert_none_lost(counts: dict, writers: dict[str, int], spark_commits: int = SPARK_COMMITS) -> None:
    for engine, c in counts.items():
        assert c["failed"] == {}, (engine, c)
        assert c["commits"] == writers[engine] * {"spark": spark_commits, "delta-rs": DELTA_RS_COMMITS}[engine]
        # every appended row exactly once, nothing else, and one version per commit
        assert c["rows_found"] == c["rows_appended"] == c["commits"] * ROWS, (engine, c)
        assert c["rows_lost"] == c["duplicates"] == c["unexpected"] == c["commits_lost"] == 0, (engine, c)
        assert c["versions"] == c["commits"], (engine, c)


def test_delta_rs_writers_lose_no_commit(store_env, tmp_path):
    # the registry's kind: three processes, commits started at the same moments
    started = time.monotonic()
    counts = run_writers("safe", store_env, tmp_path / "sync", spark_writers=0, delta_rs_writers=3)
    print(f"\ndelta-rs safe: {json.dumps(counts)} ({time.monotonic() - started:.0f} s)")
    _assert_none_lost(counts, {"delta-rs": 3})


def test_delta_rs_without_conditional_puts_refuses_every_commit(store_env, tmp_path):
    # delta-rs 1.x has no unsafe mode left: without conditional puts it refuses to commit
    # (AWS_S3_ALLOW_UNSAFE_RENAME is ignored), so it cannot lose a commit, it fails loudly
    counts = run_writers("unsafe", store_env, tmp_path / "sync", spark_writers=0, delta_rs_writers=2)["delta-rs"]
    assert counts["commits"] == 0 and counts["rows_found"] == 0 and counts["versions"] == 0, counts
    errors = [e for f in counts["failed"].values() for e in f.values()]
    assert len(errors) == 2 * DELTA_RS_COMMITS and all("conditional put is disabled" in e for e in errors), counts


@pytest.mark.spark
def test_many_spark_and_delta_rs_writers_lose_no_commit(store_env, tmp_path):
    started = time.monotonic()
    counts = run_writers("safe", store_env, tmp_path / "sync")
    print(f"\nsafe: {json.dumps(counts)} ({time.monotonic() - started:.0f} s)")
    _assert_none_lost(counts, {"spark": SPARK_WRITERS, "delta-rs": DELTA_RS_WRITERS})


@pytest.mark.spark
def test_the_log_store_refuses_the_second_of_two_simultaneous_commits(store_env, tmp_path):
    # Kappa's log store: of two writers creating one version at the same moment, one is refused
    race = run_log_store_race("safe", store_env, tmp_path / "sync")
    print(f"\nlog store, safe: {json.dumps(race)}")
    assert race["other_failures"] == [] and race["lost"] == 0, race
    assert race["versions"] == race["created"] == RACE_COMMITS and race["refused"] == RACE_COMMITS, race


@pytest.mark.spark
def test_the_log_store_kappa_replaced_tells_both_writers_they_committed(store_env, tmp_path):
    # the setting it replaced: both are told they created the version, one's commit is gone
    race = run_log_store_race("unsafe", store_env, tmp_path / "sync")
    print(f"\nlog store, unsafe: {json.dumps(race)}")
    assert race["other_failures"] == [] and race["versions"] == RACE_COMMITS, race
    assert race["lost"] > 0 and race["created"] == race["versions"] + race["lost"], race


@pytest.mark.spark
def test_the_log_store_kappa_replaced_loses_a_commit_in_every_collision(store_env, tmp_path):
    # whole Spark appends with the setting Kappa replaced, two writers whose uploads of each
    # version's commit file are held until both have arrived (tests/s3_barrier.py): both checked
    # that the version was free, both are told they committed it, one commit of each round is gone
    upstream = int(store_env["KAPPA_S3_ENDPOINT"].rsplit(":", 1)[1])
    started = time.monotonic()
    with CommitBarrier(upstream, writers=SPARK_WRITERS) as barrier:
        writers_env = {**store_env, "KAPPA_S3_ENDPOINT": f"http://127.0.0.1:{barrier.port}"}
        counts = run_writers("unsafe", store_env, tmp_path / "sync", delta_rs_writers=0,
                             spark_commits=COLLISIONS, writers_env=writers_env)["spark"]
    print(f"\nunsafe, collided: {json.dumps(counts)} ({time.monotonic() - started:.0f} s)")
    assert barrier.released_by_timeout == [], barrier.released_by_timeout  # every round collided
    assert len(barrier.held) == COLLISIONS and set(barrier.held.values()) == {SPARK_WRITERS}, dict(barrier.held)
    # every append returned, one version per round, and of each round's two commits one is gone:
    # whole commits, nothing duplicated or invented
    assert counts["failed"] == {} and counts["commits"] == SPARK_WRITERS * COLLISIONS, counts
    assert counts["versions"] == COLLISIONS and counts["commits_lost"] == COLLISIONS, counts
    assert counts["rows_lost"] == COLLISIONS * ROWS and counts["duplicates"] == counts["unexpected"] == 0, counts


@pytest.mark.spark
def test_kappas_log_store_refuses_the_colliding_commit_and_delta_retries_it(store_env, tmp_path):
    # the same collisions with Kappa's log store: the second upload is a conditional PUT the store
    # refuses, Delta retries it as the next version, and nothing is lost
    upstream = int(store_env["KAPPA_S3_ENDPOINT"].rsplit(":", 1)[1])
    with CommitBarrier(upstream, writers=SPARK_WRITERS, timeout_s=5.0) as barrier:  # a retry has no peer
        writers_env = {**store_env, "KAPPA_S3_ENDPOINT": f"http://127.0.0.1:{barrier.port}"}
        counts = run_writers("safe", store_env, tmp_path / "sync", delta_rs_writers=0,
                             spark_commits=COLLISIONS, writers_env=writers_env)
    print(f"\nsafe, collided: {json.dumps(counts)}")
    assert any(n == SPARK_WRITERS for n in barrier.held.values()), dict(barrier.held)  # some collided
    _assert_none_lost(counts, {"spark": SPARK_WRITERS}, spark_commits=COLLISIONS)
