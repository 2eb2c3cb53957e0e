#!/bin/sh
# Helm post-renderer for the Dagster chart's two webservers (tools/deploy.sh always installs the
# chart through it):
#
# 1. The writable webserver's Deployment gets 0 replicas, unless KAPPA_DAGSTER_WRITABLE_WEBSERVER=1.
#    The pinned Dagster chart renders both webservers from one template with one replica count
#    (templates/deployment-webserver.yaml includes "deployment-webserver" twice, the second with
#    webserverReadOnly; both take `replicas: dagsterWebserver.replicaCount`), so `replicaCount: 0`
#    would also turn the read-only webserver off.
# 2. The read-only webserver runs as its own service account, KAPPA_DAGSTER_WEBSERVER_ACCOUNT
#    (default kappa-dagster-webserver: the kappa chart's `dagster.webserverServiceAccount`, bound to
#    no Role), with no token mounted. The chart gives both webservers and the daemon one account
#    (`global.serviceAccountName`) and writes `automountServiceAccountToken: true` into the
#    webserver's pod spec; the read-only webserver launches and terminates nothing, so it needs no
#    Kubernetes API. The writable one keeps the daemon's account: terminating a run from the UI
#    deletes its Job (dagster-k8s K8sRunLauncher.terminate).
#
# The two Deployments are told apart by their `component` label (`dagster-webserver`,
# `dagster-webserver-read-only`). Reads the rendered manifests on stdin, writes them on stdout.
# Fails (exit 1, nothing written) unless it finds exactly one writable and one read-only webserver
# Deployment and each edit applies exactly once, so a chart that renames or reshapes them stops the
# deploy instead of leaving a writable UI up or a token mounted.
set -eu
writable=${KAPPA_DAGSTER_WRITABLE_WEBSERVER:-0}
account=${KAPPA_DAGSTER_WEBSERVER_ACCOUNT:-kappa-dagster-webserver}
awk -v keep_writable="$writable" -v account="$account" '
function flush() {
  if (doc != "") {
    if (doc ~ /(^|\n)kind: Deployment\n/ && doc ~ /\n    component: dagster-webserver\n/) {
      if (keep_writable != "1" && sub(/\n  replicas: [0-9]+\n/, "\n  replicas: 0\n", doc) != 1) {
        bad = "no spec.replicas in the writable webserver"
      }
      writable++
    }
    if (doc ~ /(^|\n)kind: Deployment\n/ && doc ~ /\n    component: dagster-webserver-read-only\n/) {
      if (sub(/\n      serviceAccountName: [^\n]+\n      automountServiceAccountToken: true\n/,
              "\n      serviceAccountName: " account "\n      automountServiceAccountToken: false\n", doc) != 1) {
        bad = "no serviceAccountName and automountServiceAccountToken: true in the read-only webserver pod spec"
      }
      readonly++
    }
    out = out doc
  }
  doc = ""
}
/^---/ { flush(); out = out $0 "\n"; next }
{ doc = doc $0 "\n" }
END {
  flush()
  if (writable != 1 || readonly != 1) {
    printf "kappa-dagster-webservers: expected one writable and one read-only webserver Deployment (component dagster-webserver, dagster-webserver-read-only), found %d and %d\n", writable, readonly > "/dev/stderr"
    exit 1
  }
  if (bad != "") { print "kappa-dagster-webservers: " bad > "/dev/stderr"; exit 1 }
  printf "%s", out
}'
