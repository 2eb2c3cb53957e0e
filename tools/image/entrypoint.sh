#!/bin/bash
# Kappa's container entrypoint (the image's ENTRYPOINT, /opt/entrypoint.sh), written for Kappa.
#
# How it is invoked (read from Spark 4.1.3's Kubernetes resource manager, spark-kubernetes_2.13:
# deploy.k8s.Constants, features.DriverCommandFeatureStep, BasicExecutorFeatureStep and
# scheduler.cluster.k8s.KubernetesExecutorBackend; the Spark operator 2.x submits through it):
#
#   driver ARGS...   the driver pod. ARGS are spark-submit's (`--properties-file <file> --class <main>
#                    <primary resource> <application args>`); env SPARK_DRIVER_BIND_ADDRESS (the pod
#                    IP), SPARK_CONF_DIR, SPARK_LOCAL_DIRS, PYSPARK_PYTHON, SPARK_USER. Runs
#                    spark-submit in client mode inside the pod, bound to the pod's address.
#   executor         an executor pod, no further arguments; everything is in env: SPARK_DRIVER_URL,
#                    SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_EXECUTOR_MEMORY (a JVM size, 1g),
#                    SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP, SPARK_EXECUTOR_POD_NAME,
#                    SPARK_RESOURCE_PROFILE_ID, SPARK_JAVA_OPT_0..N (the executor's JVM options, in
#                    index order), SPARK_CLASSPATH (extra entries, optional). Runs Spark's
#                    KubernetesExecutorBackend with the jars of the image's pyspark. Ahead of
#                    those options it sets spark.master to the pod's API server (k8s://...) and,
#                    when they name spark.authenticate.secret.executor.file, the same file as
#                    spark.authenticate.secret.file: the backend's first SecurityManager, the one
#                    that fetches the driver's properties, reads only that generic key, and reads
#                    a key file only when spark.master names Kubernetes, which Spark does not
#                    pass to executors (Spark 4.1.3: CoarseGrainedExecutorBackend.run's
#                    `new SecurityManager(executorConf)`, SecurityManager.secretKeyFromFile,
#                    SparkConf.isExecutorStartupConf). Without them an executor of an
#                    application that authenticates its RPC fails with "A secret key must be
#                    specified via the spark.authenticate.secret config".
#   anything else    run as given (Dagster's code location, runs and webservers; `kappa ...`).
#
# Every process runs under tini (PID 1: reaps children, forwards signals, so a pod's SIGTERM reaches
# the JVM). A missing variable is a one-line error naming it, exit 64. Nothing is written outside
# the pod's emptyDirs: the image's root filesystem may be read-only (no /etc/passwd edits: uid 185
# is in the image's passwd).
set -euo pipefail

die() { echo "kappa entrypoint: $*" >&2; exit 64; }
# need ROLE VAR...: each VAR set and non-empty, or a one-line error naming it
need() {
  local role=$1 v; shift
  for v in "$@"; do [[ -n "${!v:-}" ]] || die "$role: environment variable $v is not set (Spark sets it in $role pods)"; done
}

: "${SPARK_HOME:?SPARK_HOME is not set}" "${JAVA_HOME:?JAVA_HOME is not set}"
[[ $# -gt 0 ]] || die "no command (expected driver, executor or a command to run)"

case "$1" in
  driver)
    shift
    need driver SPARK_DRIVER_BIND_ADDRESS
    exec /usr/bin/tini -- "$SPARK_HOME/bin/spark-submit" \
      --deploy-mode client \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      "$@"
    ;;
  executor)
    [[ $# -eq 1 ]] || die "executor: takes no arguments (got: ${*:2})"
    need executor SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
      SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP SPARK_EXECUTOR_POD_NAME
    # SPARK_JAVA_OPT_<i>, in numeric order of <i> (one JVM option each, spaces kept)
    java_opts=()
    while read -r name; do java_opts+=("${!name}"); done < <(
      compgen -v SPARK_JAVA_OPT_ | sed -n 's/^SPARK_JAVA_OPT_\([0-9][0-9]*\)$/\1 &/p' | sort -n | cut -d' ' -f2)
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}"
    startup=("-Dspark.master=k8s://https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}")
    for opt in "${java_opts[@]}"; do
      [[ $opt == -Dspark.authenticate.secret.executor.file=* ]] &&
        startup+=("-Dspark.authenticate.secret.file=${opt#-Dspark.authenticate.secret.executor.file=}")
    done
    exec /usr/bin/tini -- "$JAVA_HOME/bin/java" "${startup[@]}" "${java_opts[@]}" \
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec /usr/bin/tini -- "$@"
    ;;
esac
