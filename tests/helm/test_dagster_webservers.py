"""Dagster's read-only webserver stays up, on an account of its own with no token, while the
writable one is off.

The pinned Dagster chart (helm/upstream.env) renders both webservers from one template with one
replica count, `dagsterWebserver.replicaCount` (its templates/deployment-webserver.yaml includes
"deployment-webserver" twice, the second time with `webserverReadOnly`), so `replicaCount: 0`
turns the read-only webserver off too; and both get the daemon's service account
(`global.serviceAccountName`) with `automountServiceAccountToken: true` written in the template.
Kappa's values keep the count at 1 and tools/deploy.sh installs the chart through the post-renderer
helm/postrender/kappa-dagster-webservers, which sets the writable Deployment (label
`component: dagster-webserver`) to 0 replicas (unless KAPPA_DAGSTER_WRITABLE_WEBSERVER=1) and puts
the read-only one on the kappa chart's `kappa-dagster-webserver` account with no token.

The Dagster chart itself is not here to render: it is fetched from its repository at deploy time
and no copy is kept offline. So the post-renderer is run by the pinned helm, as deploy.sh runs it,
over a stand-in chart whose two Deployments carry the Dagster chart's names, `component` labels,
replica count and pod-spec account lines (its helpers/_deployment-webserver.tpl), with Kappa's
Dagster values."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helmtools import HELM, ROOT, TOOLS, ensure_tools

POSTRENDER = ROOT / "helm" / "postrender"
SCRIPT = POSTRENDER / "kappa-dagster-webservers" / "webservers.sh"

# Two Deployments as the Dagster chart labels them (metadata.labels.component; the pod template
# carries the same label deeper, which must not match), one replica count and one account for both.
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
      serviceAccountName: {{ $.Values.global.serviceAccountName }}
      automountServiceAccountToken: true
      containers:
        - name: dagster
          image: dagster
{{- end }}
"""


def _stand_in(tmp_path: Path, template: str = STAND_IN) -> Path:
    chart = tmp_path / "dagster"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: dagster\nversion: 0.0.0\n")
    (chart / "values.yaml").write_text("global:\n  serviceAccountName: dagster\ndagsterWebserver:\n  replicaCount: 1\n")
    (chart / "templates" / "deployment-webserver.yaml").write_text(template)
    return chart


def _template(chart: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`helm template dagster CHART -f helm/values/dagster.yaml ARGS` with the pinned helm and
    HELM_PLUGINS at helm/postrender, as tools/deploy.sh runs the Dagster chart."""
    ensure_tools()
    return subprocess.run(
        [str(HELM), "template", "dagster", str(chart), "--namespace", "kappa",
         "-f", str(ROOT / "helm" / "values" / "dagster.yaml"), *args],
        cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "HELM_PLUGINS": str(POSTRENDER), "HELM_CACHE_HOME": str(TOOLS / "helm-cache"),
             "HELM_CONFIG_HOME": str(TOOLS / "helm-config"), **(env or {})})


def _replicas(out: str) -> dict[str, int]:
    return {d["metadata"]["name"]: d["spec"]["replicas"] for d in yaml.safe_load_all(out) if d}


def _accounts(out: str) -> dict[str, tuple[str, bool]]:
    """Each Deployment's pod service account and whether its token is mounted."""
    return {d["metadata"]["name"]: (d["spec"]["template"]["spec"]["serviceAccountName"],
                                    d["spec"]["template"]["spec"]["automountServiceAccountToken"])
            for d in yaml.safe_load_all(out) if d}


def test_with_kappas_values_both_webservers_get_one_replica_count_and_the_daemons_token(tmp_path):
    rendered = _template(_stand_in(tmp_path))
    assert rendered.returncode == 0, rendered.stderr
    assert _replicas(rendered.stdout) == {"dagster-dagster-webserver": 1, "dagster-dagster-webserver-read-only": 1}
    assert set(_accounts(rendered.stdout).values()) == {("kappa-dagster", True)}  # what the post-renderer fixes


def test_the_post_renderer_turns_the_writable_webserver_off_and_takes_the_read_only_ones_token(tmp_path):
    rendered = _template(_stand_in(tmp_path), "--post-renderer", "kappa-dagster-webservers")
    assert rendered.returncode == 0, rendered.stderr
    assert _replicas(rendered.stdout) == {"dagster-dagster-webserver": 0, "dagster-dagster-webserver-read-only": 1}
    assert _accounts(rendered.stdout) == {"dagster-dagster-webserver": ("kappa-dagster", True),
                                          "dagster-dagster-webserver-read-only": ("kappa-dagster-webserver", False)}


def test_with_the_writable_webserver_on_the_read_only_one_still_has_no_token(tmp_path):
    """DAGSTER_WRITABLE_WEBSERVER=1 (tools/deploy.sh) reaches the plugin as its environment."""
    rendered = _template(_stand_in(tmp_path), "--post-renderer", "kappa-dagster-webservers",
                         env={"KAPPA_DAGSTER_WRITABLE_WEBSERVER": "1"})
    assert rendered.returncode == 0, rendered.stderr
    assert _replicas(rendered.stdout) == {"dagster-dagster-webserver": 1, "dagster-dagster-webserver-read-only": 1}
    assert _accounts(rendered.stdout)["dagster-dagster-webserver-read-only"] == ("kappa-dagster-webserver", False)


def test_the_post_renderer_stops_a_deploy_where_it_finds_no_webserver_to_turn_off(tmp_path):
    renamed = STAND_IN.replace('"dagster-webserver" "dagster-webserver-read-only"', '"webserver" "webserver-ro"')
    rendered = _template(_stand_in(tmp_path, renamed), "--post-renderer", "kappa-dagster-webservers")
    assert rendered.returncode != 0
    assert 'post-renderer plugin "kappa-dagster-webservers"' in rendered.stderr
    # Helm 4 does not pass the plugin's stderr on; the script itself says why
    plain = _template(_stand_in(tmp_path / "plain", renamed))
    alone = subprocess.run([str(SCRIPT)], input=plain.stdout, capture_output=True, text=True)
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr == ("kappa-dagster-webservers: expected one writable and one read-only webserver "
                            "Deployment (component dagster-webserver, dagster-webserver-read-only), found 0 and 0\n")


def test_the_post_renderer_stops_a_deploy_where_the_read_only_webserver_would_keep_its_token(tmp_path):
    # a chart that no longer writes the token line where expected: the edit cannot apply
    plain = _template(_stand_in(tmp_path, STAND_IN.replace(
        "      automountServiceAccountToken: true\n", "")))
    assert plain.returncode == 0, plain.stderr
    alone = subprocess.run([str(SCRIPT)], input=plain.stdout, capture_output=True, text=True)
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr == ("kappa-dagster-webservers: no serviceAccountName and automountServiceAccountToken: "
                            "true in the read-only webserver pod spec\n")


@pytest.mark.parametrize("writable", ["0", "1"])
def test_deploy_installs_dagster_through_the_post_renderer_and_points_at_the_read_only_ui(writable):
    proc = subprocess.run(["bash", "tools/deploy.sh"], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "DRY_RUN": "1", "DAGSTER_WRITABLE_WEBSERVER": writable})
    [install] = [line for line in proc.stdout.splitlines() if line.startswith("+ ") and "install dagster" in line]
    assert f"HELM_PLUGINS={POSTRENDER}" in install or "webservers.sh" in install
    assert "--post-renderer" in install  # always: the read-only webserver's account
    assert ("KAPPA_DAGSTER_WRITABLE_WEBSERVER=1" in install) is (writable == "1")
    assert "port-forward svc/dagster-dagster-webserver-read-only 8080:80" in proc.stdout
    assert "port-forward svc/dagster-dagster-webserver " not in proc.stdout
