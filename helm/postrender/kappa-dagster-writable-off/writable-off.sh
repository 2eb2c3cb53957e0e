#!/bin/sh
# Helm post-renderer for the Dagster chart: the writable webserver's Deployment gets 0 replicas, the
# read-only one keeps dagsterWebserver.replicaCount.
#
# Why: the pinned Dagster chart renders both webservers from one template with one replica count
# (templates/deployment-webserver.yaml includes "deployment-webserver" twice, the second with
# webserverReadOnly; both take `replicas: dagsterWebserver.replicaCount`), so `replicaCount: 0`
# also turns the read-only webserver off. The two differ in their `component` label
# (`dagster-webserver`, `dagster-webserver-read-only`), which this matches.
#
# Reads the rendered manifests on stdin, writes them on stdout. Fails (exit 1, nothing written)
# unless it finds exactly one writable and one read-only webserver Deployment, so a chart that
# renames them stops the deploy instead of leaving a writable UI up.
set -eu
awk '
function flush() {
  if (doc != "") {
    if (doc ~ /(^|\n)kind: Deployment\n/ && doc ~ /\n    component: dagster-webserver\n/) {
      if (sub(/\n  replicas: [0-9]+\n/, "\n  replicas: 0\n", doc) != 1) { bad = "no spec.replicas in the writable webserver"; }
      writable++
    }
    if (doc ~ /(^|\n)kind: Deployment\n/ && doc ~ /\n    component: dagster-webserver-read-only\n/) readonly++
    out = out doc
  }
  doc = ""
}
/^---/ { flush(); out = out $0 "\n"; next }
{ doc = doc $0 "\n" }
END {
  flush()
  if (bad != "") { print "kappa-dagster-writable-off: " bad > "/dev/stderr"; exit 1 }
  if (writable != 1 || readonly != 1) {
    printf "kappa-dagster-writable-off: expected one writable and one read-only webserver Deployment (component dagster-webserver, dagster-webserver-read-only), found %d and %d\n", writable, readonly > "/dev/stderr"
    exit 1
  }
  printf "%s", out
}'
