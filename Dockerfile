# The Kappa image: Spark (pyspark), the Maven-resolved jars, the kappa library and assets/. Used by
# Kappa's SparkApplications (driver and executors) and by Dagster's code location.
#
#   docker build -t registry.example.com/kappa/kappa:0.1.0 .
#
# Stages: `jars` resolves JVM dependencies with Maven (never Ivy at run time), `python` builds the
# virtualenv from requirements.lock, and the final stage copies their results into a slim runtime
# with Kappa's own entrypoint (tools/image/entrypoint.sh: Spark's `driver` / `executor` modes) that
# runs as uid 185 (non-root, the uid Spark's own images use), so it passes Pod Security "restricted".
#
# Without a reachable registry, `make image` (tools/container/) builds local Debian base images and
# passes them as PYTHON_IMAGE / MAVEN_IMAGE; behind a TLS-intercepting proxy it mounts the machine's
# CA certificates read-only at BUILD_CA for the RUN steps that download (pip, Maven): a build-time
# mount, never a file of any layer (tests/cluster/test_image.py checks).
#
# Base images by digest (the multi-platform index), so a tag moved in the registry changes nothing
# that is built: Docker official images, digests as docker-library/repo-info records them
# (repos/<image>/remote/<tag>.md): python 3.11.16 of 2026-08-25 (repo-info 33a22f4), maven with
# Temurin 17.0.20 of 2026-09-16 (1fd86ba). To move one, replace tag and digest
# together (`docker buildx imagetools inspect <image>:<tag>` prints the index digest). No BuildKit
# `# syntax=` line: the builder's own Dockerfile frontend, not an image pulled by tag.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17@sha256:42a3ac393abbc64dae6c96703e5ead2e921fe9103371ac58b5b404b0d6a26502

FROM ${MAVEN_IMAGE} AS jars
ARG BUILD_CA=/run/kappa-build-ca
WORKDIR /src
COPY jvm/ jvm/
COPY tools/image/pom.xml tools/image/pom.xml
RUN if [ -f "$BUILD_CA/java/cacerts" ]; then export MAVEN_OPTS="-Djavax.net.ssl.trustStore=$BUILD_CA/java/cacerts"; fi \
 && mvn -q -B -C -s jvm/settings.xml -f jvm/spark/pom.xml dependency:copy-dependencies \
 && mvn -q -B -C -s jvm/settings.xml -f tools/image/pom.xml dependency:copy-dependencies \
 && mvn -q -B -C -s jvm/settings.xml -f jvm/serve-auth/pom.xml package \
 && mvn -q -B -C -s jvm/settings.xml -f jvm/sql-guard/pom.xml package \
 && mvn -q -B -C -s jvm/settings.xml -f jvm/delta-logstore/pom.xml package \
 && ls build/jars/spark/kappa-delta-logstore.jar build/jars/serve/kappa-serve-auth.jar build/jars/serve/kappa-sql-guard.jar

FROM ${PYTHON_IMAGE} AS python
ARG BUILD_CA=/run/kappa-build-ca
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kappa/venv
COPY requirements.lock /src/requirements.lock
RUN if [ -f "$BUILD_CA/ca-certificates.crt" ]; then export PIP_CERT="$BUILD_CA/ca-certificates.crt"; fi \
 && /opt/kappa/venv/bin/pip install --require-hashes -r /src/requirements.lock
COPY pyproject.toml README.md* /src/
COPY platform/ /src/platform/
# the build backend is the venv's setuptools, from the hashed lock above (no isolated build env)
RUN /opt/kappa/venv/bin/pip install --no-deps --no-build-isolation /src

FROM ${PYTHON_IMAGE}
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 185 spark \
 && useradd --system --uid 185 --gid 185 --home-dir /opt/kappa --shell /usr/sbin/nologin spark
COPY --from=python /opt/kappa/venv /opt/kappa/venv
COPY --from=jars /src/build/jars/spark /opt/kappa/jars/spark
COPY --from=jars /src/build/jars/serve /opt/kappa/jars/serve
# Kappa's entrypoint turns the operator's `driver` / `executor` arguments into spark-submit or
# Spark's executor backend, and runs any other command (Dagster's, `kappa`) as given, under tini.
COPY tools/image/entrypoint.sh /opt/entrypoint.sh
COPY assets/ /opt/kappa/assets/
# The SparkApplications' mainApplicationFile (must be a file): a streaming version runs
# `python -m kappa.runners.entrypoint`, a gate runs the `kappa` command (`kappa gate ASSET VERSION`).
# Not named kappa.py: a script's folder comes first on sys.path, so a kappa.py beside entrypoint.py
# would be imported as the package `kappa` (a driver pod on the real node failed so).
RUN mkdir -p /opt/kappa/bin /opt/kappa/work \
 && printf 'import runpy\nrunpy.run_module("kappa.runners.entrypoint", run_name="__main__", alter_sys=True)\n' \
      > /opt/kappa/bin/entrypoint.py \
 && printf 'import runpy\nrunpy.run_module("kappa.cli", run_name="__main__", alter_sys=True)\n' \
      > /opt/kappa/bin/kappa_cli.py \
 && ln -s /usr/bin/tini /sbin/tini \
 && ln -s /usr/lib/jvm/java-17-openjdk-${TARGETARCH:-amd64} /usr/lib/jvm/java-17 \
 && chown -R 185:185 /opt/kappa/work
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/opt/kappa/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/kappa/venv/bin/python \
    PATH=/opt/kappa/venv/bin:/opt/kappa/venv/lib/python3.11/site-packages/pyspark/bin:$PATH \
    KAPPA_PROJECT_DIR=/opt/kappa \
    KAPPA_ASSETS_DIR=/opt/kappa/assets \
    KAPPA_JARS_DIR=/opt/kappa/jars \
    KAPPA_K8S_JARS_DIR=/opt/kappa/jars/spark \
    KAPPA_HOME=/opt/kappa/work
WORKDIR /opt/kappa/work
USER 185:185
ENTRYPOINT ["/opt/entrypoint.sh"]
