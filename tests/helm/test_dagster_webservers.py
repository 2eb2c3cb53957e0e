"""Dagster's read-only webserver stays up while the writable one is off.

The pinned Dagster chart (helm/upstream.env) renders both webservers from one template with one
replica count, `dagsterWebserver.replicaCount` (its templates/deployment-webserver.yaml includes
"deployment-webserver" twice, the second time with `webserverReadOnly`), so `replicaCount: 0`
turns the read-only webserver off too. Kappa's values keep the count at 1 and tools/deploy.sh
installs the chart through the post-renderer helm/postrender/kappa-dagster-writable-off, which sets
the writable Deployment (label `component: dagster-webserver`) to 0 replicas.

The Dagster chart itself is not here to render: it is fetched from its repository at deploy time
and no copy is kept offline. So the post-renderer is run by the pinned helm, as deploy.sh runs it,
over a stand-in chart whose two Deployments carry the Dagster chart's names, `component` labels and
replica count, with Kappa's Dagster values."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helmtools import HELM, ROOT, TOOLS, ensure_tools

POSTRENDER = ROOT / "helm" / "postrender"
SCRIPT = POSTRENDER / "kappa-dagster-writable-off" / "writable-off.sh"

# Two Deployments as the Dagster chart labels them (metadata.labels.component; the pod template
# carries the same label deeper, which must not match), one replica count for both.
STAND_IN = """\
{{- range $component := list "dagster-webserver" "dagster-webserver-read-only" }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $.Release.Name }}-{{ $component }}
  labels:
    app.kubernetes.io/name: dagster
    component: {{ $component }}
spec:
  replicas: {{ $.Values.dagsterWebserver.replicaCount }}
  selector:
    matchLabels:
      component: {{ $component }}
  template:
    metadata:
      labels:
        component: {{ $component }}
    spec:
      containers:
        - name: dagster
          image: dagster
{{- end }}
"""


def _stand_in(tmp_path: Path, template: str = STAND_IN) -> Path:
    chart = tmp_path / "dagster"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: dagster\nversion: 0.0.0\n")
    (chart / "values.yaml").write_text("dagsterWebserver:\n  replicaCount: 1\n")
    (chart / "templates" / "deployment-webserver.yaml").write_text(template)
    return chart


def _template(chart: Path, *args: str) -> subprocess.CompletedProcess:
    """`helm template dagster CHART -f helm/values/dagster.yaml ARGS` with the pinned helm and
    HELM_PLUGINS at helm/postrender, as tools/deploy.sh runs the Dagster chart."""
    ensure_tools()
    return subprocess.run(
        [str(HELM), "template", "dagster", str(chart), "--namespace", "kappa",
         "-f", str(ROOT / "helm" / "values" / "dagster.yaml"), *args],
        cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "HELM_PLUGINS": str(POSTRENDER), "HELM_CACHE_HOME": str(TOOLS / "helm-cache"),
             "HELM_CONFIG_HOME": str(TOOLS / "helm-config")})


def _replicas(out: str) -> dict[str, int]:
    return {d["metadata"]["name"]: d["spec"]["replicas"] for d in yaml.safe_load_all(out) if d}


def test_with_kappas_values_both_webservers_get_one_replica_count_and_it_is_not_zero(tmp_path):
    rendered = _template(_stand_in(tmp_path))
    assert rendered.returncode == 0, rendered.stderr
    assert _replicas(rendered.stdout) == {"dagster-dagster-webserver": 1, "dagster-dagster-webserver-read-only": 1}


def test_the_post_renderer_turns_the_writable_webserver_off_and_keeps_the_read_only_one(tmp_path):
    rendered = _template(_stand_in(tmp_path), "--post-renderer", "kappa-dagster-writable-off")
    assert rendered.returncode == 0, rendered.stderr
    assert _replicas(rendered.stdout) == {"dagster-dagster-webserver": 0, "dagster-dagster-webserver-read-only": 1}


def test_the_post_renderer_stops_a_deploy_where_it_finds_no_webserver_to_turn_off(tmp_path):
    renamed = STAND_IN.replace('"dagster-webserver" "dagster-webserver-read-only"', '"webserver" "webserver-ro"')
    rendered = _template(_stand_in(tmp_path, renamed), "--post-renderer", "kappa-dagster-writable-off")
    assert rendered.returncode != 0
    assert 'post-renderer plugin "kappa-dagster-writable-off"' in rendered.stderr
    # Helm 4 does not pass the plugin's stderr on; the script itself says why
    plain = _template(_stand_in(tmp_path / "plain", renamed))
    alone = subprocess.run([str(SCRIPT)], input=plain.stdout, capture_output=True, text=True)
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr == ("kappa-dagster-writable-off: expected one writable and one read-only webserver "
                            "Deployment (component dagster-webserver, dagster-webserver-read-only), found 0 and 0\n")


@pytest.mark.parametrize("writable", ["0", "1"])
def test_deploy_installs_dagster_through_the_post_renderer_and_points_at_the_read_only_ui(writable):
    proc = subprocess.run(["bash", "tools/deploy.sh"], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "DRY_RUN": "1", "DAGSTER_WRITABLE_WEBSERVER": writable})
    [install] = [line for line in proc.stdout.splitlines() if line.startswith("+ ") and "install dagster" in line]
    assert f"HELM_PLUGINS={POSTRENDER}" in install or "writable-off.sh" in install
    assert ("--post-renderer" in install) is (writable == "0")
    assert "port-forward svc/dagster-dagster-webserver-read-only 8080:80" in proc.stdout
    assert "port-forward svc/dagster-dagster-webserver " not in proc.stdout
