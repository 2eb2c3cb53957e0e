#!/usr/bin/env bash
# Deploy Kappa on a Kubernetes cluster, in order, with pinned chart versions (helm/upstream.env):
#   1. the namespace (Pod Security "restricted" labels, from the kappa chart's own template);
#   2. the Strimzi cluster operator          (namespace strimzi,        watches the Kappa namespace);
#   3. the Kubeflow Spark operator           (namespace spark-operator, runs apps in the Kappa namespace);
#   4. the kappa chart (Kafka, topics, users, Kafka Connect + Debezium, RBAC, NetworkPolicies, runner
#      config), then waits for Kafka;
#   5. Dagster with Kappa's code location    (helm/values/dagster.yaml).
# Prerequisites: kubectl pointing at the cluster, helm 3.18+ or 4 (or `make tools`), and in the
# Kappa namespace the Secrets named in the values: the object-store keys (`kappa-object-store`), the
# SQL endpoint's own read-only object-store keys (`kappa-serve-object-store`),
# Dagster's PostgreSQL password (`kappa-dagster-postgresql`), the SQL endpoint's password file
# (`kappa-serve-users`) and Debezium's database user (`kappa-ops-database`).
#
#   tools/deploy.sh -f my-kappa-values.yaml [...]      extra args go to the kappa chart; the values
#                                                      must name the NetworkPolicy egress peers (the
#                                                      object store, the API server, the databases:
#                                                      required, see helm/kappa/ci/default-values.yaml)
#
# Environment: NAMESPACE (default kappa), HELM and KUBECTL (default build/tools/bin/{helm,kubectl} if
# built, else from PATH), DRY_RUN=1 prints the commands without running them, OFFLINE=1 never asks
# a chart repository (as if none could be reached: the substitutions below),
# DAGSTER_WRITABLE_WEBSERVER=1 runs Dagster's writable webserver too (off by default: it has no login).
#
# Offline (a chart repository cannot be reached, e.g. against `make cluster-up`'s local control plane):
# Strimzi's operator chart is replaced by its CRDs (from Strimzi's generator, `make tools`), so Kafka
# resources are accepted and validated but not reconciled; the Spark operator's chart comes from its
# Go module (`make cluster-tools`); Dagster's chart is skipped. Each substitution is announced.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../helm/upstream.env
. helm/upstream.env
NAMESPACE=${NAMESPACE:-kappa}
HELM=${HELM:-$( [ -x build/tools/bin/helm ] && echo build/tools/bin/helm || echo helm )}
KUBECTL=${KUBECTL:-$( [ -x build/tools/bin/kubectl ] && echo build/tools/bin/kubectl || echo kubectl )}
run() { echo "+ $*"; [ "${DRY_RUN:-0}" = 1 ] || "$@"; }
kubectl() { "$KUBECTL" "$@"; }
# reachable CHART REPO VERSION: whether the chart can be fetched (always "yes" in a dry run).
reachable() {
  [ "${DRY_RUN:-0}" = 1 ] && return 0
  [ "${OFFLINE:-0}" = 1 ] && return 1
  timeout 30 "$HELM" show chart "$1" --repo "$2" --version "$3" >/dev/null 2>&1
}

echo "== 1/5 namespace $NAMESPACE (Pod Security restricted)"
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "+ $HELM template kappa helm/kappa -n $NAMESPACE --show-only templates/000-Namespace.yaml $* --set namespace.create=true | kubectl apply -f -"
else
  # namespace.create=true after the user's values: their file may say false (the chart is then
  # installed into this namespace), the labels still come from the chart's template.
  "$HELM" template kappa helm/kappa -n "$NAMESPACE" --show-only templates/000-Namespace.yaml "$@" \
    --set namespace.create=true | kubectl apply -f -
fi

echo "== 2/5 Strimzi cluster operator $STRIMZI_VERSION"
STRIMZI_OPERATOR=1
if reachable strimzi-kafka-operator "$STRIMZI_REPO" "$STRIMZI_VERSION"; then
  run "$HELM" upgrade --install strimzi strimzi-kafka-operator --repo "$STRIMZI_REPO" --version "$STRIMZI_VERSION" \
    --namespace strimzi --create-namespace -f helm/values/strimzi-operator.yaml \
    --set "watchNamespaces={$NAMESPACE}" --wait
else
  STRIMZI_OPERATOR=0
  crds=build/tools/strimzi-$STRIMZI_VERSION/crds
  [ -d "$crds" ] || { echo "error: $STRIMZI_REPO unreachable and $crds missing: run \`make tools\`" >&2; exit 1; }
  echo "SKIPPED: the Strimzi operator chart cannot be fetched from $STRIMZI_REPO (offline?); applying only"
  echo "         Strimzi's CRDs ($crds): Kafka resources are schema-validated but nothing reconciles them."
  run kubectl apply --server-side -f "$crds"
  run kubectl wait --for=condition=Established --timeout=60s -f "$crds"
fi

echo "== 3/5 Spark operator $SPARK_OPERATOR_VERSION"
if reachable spark-operator "$SPARK_OPERATOR_REPO" "$SPARK_OPERATOR_VERSION"; then
  spark_chart=(spark-operator --repo "$SPARK_OPERATOR_REPO" --version "$SPARK_OPERATOR_VERSION")
else
  chart=build/tools/spark-operator-$SPARK_OPERATOR_VERSION/chart
  [ -d "$chart" ] || { echo "error: $SPARK_OPERATOR_REPO unreachable and $chart missing: run \`make cluster-tools\`" >&2; exit 1; }
  echo "OFFLINE: the spark-operator chart comes from its Go module ($chart), the same chart version."
  spark_chart=("$chart")
fi
run "$HELM" upgrade --install spark-operator "${spark_chart[@]}" \
  --namespace spark-operator --create-namespace -f helm/values/spark-operator.yaml \
  --set "spark.jobNamespaces={$NAMESPACE}" --wait

echo "== 4/5 kappa chart"
run "$HELM" upgrade --install kappa helm/kappa --namespace "$NAMESPACE" --set namespace.create=false "$@" --wait
if [ "$STRIMZI_OPERATOR" = 1 ]; then
  run kubectl -n "$NAMESPACE" wait kafka/kappa --for=condition=Ready --timeout=15m
else
  echo "SKIPPED: waiting for kafka/kappa to become Ready (no Strimzi operator reconciles it)."
fi

echo "== 5/5 Dagster $DAGSTER_VERSION"
if reachable dagster "$DAGSTER_REPO" "$DAGSTER_VERSION"; then
  # The post-renderer (helm/postrender/kappa-dagster-webservers) gives the read-only webserver its own
  # account with no token, and turns the writable one off: the chart gives both webservers one
  # replica count and the daemon's account. Helm 4 takes a post-renderer plugin by name (found
  # through HELM_PLUGINS, for this command only), Helm 3 the script's path; both pass it this
  # environment.
  webservers=(--post-renderer kappa-dagster-webservers)
  plugins=(env "HELM_PLUGINS=$PWD/helm/postrender")
  if [ "$("$HELM" version --template '{{.Version}}' 2>/dev/null | cut -c1-2)" = v3 ]; then
    webservers=(--post-renderer helm/postrender/kappa-dagster-webservers/webservers.sh)
    plugins=(env)
  fi
  if [ "${DAGSTER_WRITABLE_WEBSERVER:-0}" = 1 ]; then
    echo "DAGSTER_WRITABLE_WEBSERVER=1: the writable webserver runs too; serve it only through an"
    echo "         authenticating proxy (helm/README.md, \"Dagster UI\")."
    plugins+=(KAPPA_DAGSTER_WRITABLE_WEBSERVER=1)
  fi
  run "${plugins[@]}" "$HELM" upgrade --install dagster dagster --repo "$DAGSTER_REPO" --version "$DAGSTER_VERSION" \
    --namespace "$NAMESPACE" -f helm/values/dagster.yaml "${webservers[@]}" --wait
  echo "Done. Dagster UI (read-only): kubectl -n $NAMESPACE port-forward svc/dagster-dagster-webserver-read-only 8080:80"
else
  echo "SKIPPED: the Dagster chart cannot be fetched from $DAGSTER_REPO (offline?); Dagster is not installed."
  echo "Done (partial: see SKIPPED above)."
fi
