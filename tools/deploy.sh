#!/usr/bin/env bash
# Deploy Kappa on a Kubernetes cluster, in order, with pinned chart versions (helm/upstream.env):
#   1. the namespace (Pod Security "restricted" labels, from the kappa chart's own template);
#   2. the Strimzi cluster operator          (namespace strimzi,        watches the Kappa namespace);
#   3. the Kubeflow Spark operator           (namespace spark-operator, runs apps in the Kappa namespace);
#   4. the kappa chart (Kafka, topics, users, RBAC, NetworkPolicies, runner config), then waits for Kafka;
#   5. Dagster with Kappa's code location    (helm/values/dagster.yaml).
# Prerequisites: kubectl pointing at the cluster, helm 3.18+ or 4 (or `make tools`), and in the
# Kappa namespace the Secrets named in the values: the object-store keys (`kappa-object-store`) and
# Dagster's PostgreSQL password (`kappa-dagster-postgresql`).
#
#   tools/deploy.sh [-f my-kappa-values.yaml ...]      extra args go to the kappa chart
#
# Environment: NAMESPACE (default kappa), HELM (default build/tools/bin/helm if built, else helm),
# DRY_RUN=1 prints the commands without running them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../helm/upstream.env
. helm/upstream.env
NAMESPACE=${NAMESPACE:-kappa}
HELM=${HELM:-$( [ -x build/tools/bin/helm ] && echo build/tools/bin/helm || echo helm )}
run() { echo "+ $*"; [ "${DRY_RUN:-0}" = 1 ] || "$@"; }

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
run "$HELM" upgrade --install strimzi strimzi-kafka-operator --repo "$STRIMZI_REPO" --version "$STRIMZI_VERSION" \
  --namespace strimzi --create-namespace -f helm/values/strimzi-operator.yaml \
  --set "watchNamespaces={$NAMESPACE}" --wait

echo "== 3/5 Spark operator $SPARK_OPERATOR_VERSION"
run "$HELM" upgrade --install spark-operator spark-operator --repo "$SPARK_OPERATOR_REPO" --version "$SPARK_OPERATOR_VERSION" \
  --namespace spark-operator --create-namespace -f helm/values/spark-operator.yaml \
  --set "spark.jobNamespaces={$NAMESPACE}" --wait

echo "== 4/5 kappa chart"
run "$HELM" upgrade --install kappa helm/kappa --namespace "$NAMESPACE" --set namespace.create=false "$@" --wait
run kubectl -n "$NAMESPACE" wait kafka/kappa --for=condition=Ready --timeout=15m

echo "== 5/5 Dagster $DAGSTER_VERSION"
run "$HELM" upgrade --install dagster dagster --repo "$DAGSTER_REPO" --version "$DAGSTER_VERSION" \
  --namespace "$NAMESPACE" -f helm/values/dagster.yaml --wait

echo "Done. Dagster UI: kubectl -n $NAMESPACE port-forward svc/dagster-dagster-webserver 8080:80"
