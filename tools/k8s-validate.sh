#!/usr/bin/env bash
# Offline, strict validation of everything Kappa deploys on Kubernetes (`make k8s-validate`):
#   1. helm lint, with the default values (or ci/default-values.yaml where a chart has one) and with
#      every helm/*/ci/*-values.yaml scenario;
#   2. helm template for each of those scenarios;
#   3. kubeconform -strict on every rendered object, against the core schemas of each Kubernetes
#      version in K8S_VERSIONS and the CRD schemas (Strimzi, SparkApplication): unknown fields fail,
#      and so does an object whose kind has no schema (no -ignore-missing-schemas);
#   4. the same for the plain manifests in k8s/, after checking they match what the chart and the
#      runner render now (k8s/ is generated, never hand-edited).
# Tools and schemas come from `make tools`; nothing is downloaded here.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${HELM:-build/tools/bin/helm}
KUBECONFORM=${KUBECONFORM:-build/tools/bin/kubeconform}
SCHEMAS=${SCHEMAS:-build/tools/schemas}
PYTHON=${PYTHON:-.venv/bin/python}
K8S_VERSIONS=${K8S_VERSIONS:?set K8S_VERSIONS, e.g. "1.33.0 1.37.0"}
OUT=build/k8s-validate
rm -rf "$OUT" && mkdir -p "$OUT"
start=$(date +%s)

for tool in "$HELM" "$KUBECONFORM"; do
  [ -x "$tool" ] || { echo "missing $tool: run 'make tools'" >&2; exit 1; }
done

conform() {  # conform FILE...: strict validation against every pinned Kubernetes version
  local v
  for v in $K8S_VERSIONS; do
    "$KUBECONFORM" -strict -summary -output text \
      -kubernetes-version "$v" \
      -schema-location "$SCHEMAS/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
      -schema-location "$SCHEMAS/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json" \
      "$@" | sed "s/^/  [k8s $v] /"
  done
}

summary=()
files=()
for chart in helm/*/; do
  chart=${chart%/}
  [ -f "$chart/Chart.yaml" ] || continue
  name=$(basename "$chart")
  # a chart whose defaults cannot render alone (kappa: egress peers are required values) keeps
  # its defaults plus the required values in ci/default-values.yaml, which stands for "default"
  scenarios=()
  [ -e "$chart/ci/default-values.yaml" ] || scenarios=(default)
  for f in "$chart"/ci/*-values.yaml; do [ -e "$f" ] && scenarios+=("$f"); done
  for scenario in "${scenarios[@]}"; do
    args=()
    label=default
    if [ "$scenario" != default ]; then args=(-f "$scenario"); label=$(basename "$scenario" -values.yaml); fi
    echo "== $name / $label"
    "$HELM" lint --strict "$chart" "${args[@]}" --namespace kappa | grep -v '^$' | sed 's/^/  /'
    rendered="$OUT/$name-$label.yaml"
    "$HELM" template kappa "$chart" --namespace kappa "${args[@]}" > "$rendered"
    objects=$(grep -c '^kind: ' "$rendered" || true)
    files+=("$rendered")
    summary+=("$(printf '%-10s %-28s %3s objects' "$name" "$label" "$objects")")
  done
done

echo "== k8s/ (plain manifests)"
HELM="$HELM" PYTHON="$PYTHON" bash tools/k8s-manifests.sh "$OUT/k8s-expected" >/dev/null
if ! diff -r -q k8s "$OUT/k8s-expected" >/dev/null; then
  diff -r -u k8s "$OUT/k8s-expected" | head -40 >&2 || true
  echo "k8s/ is stale: run 'make k8s-manifests' and commit the result" >&2
  exit 1
fi
files+=(k8s/*.yaml)
summary+=("$(printf '%-10s %-28s %3s objects' "k8s/" "plain manifests" "$(cat k8s/*.yaml | grep -c '^kind: ')")")

# One kubeconform run per Kubernetes version over every file: loading the schemas dominates.
echo "== kubeconform -strict: ${#files[@]} files"
conform "${files[@]}"

echo "== validated (strict, Kubernetes $K8S_VERSIONS) in $(( $(date +%s) - start ))s"
printf '  %s\n' "${summary[@]}"
