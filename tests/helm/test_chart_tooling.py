"""What keeps the chart honest: generated files are up to date, every value is documented, the
strict validation really rejects unknown fields, and the pinned upstream values and deploy order
are coherent."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import yaml

from helmtools import CHART, KUBECONFORM, ROOT, SCHEMAS, TOOLS, ensure_tools, render
from kappa.runners.kubernetes import render_chart_catalog


def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Z0-9_]+)=(\S*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


VERSIONS = _env_file(ROOT / "tools" / "versions.env")
UPSTREAM = _env_file(ROOT / "helm" / "upstream.env")


def kubeconform(*paths: Path, version: str | None = None) -> subprocess.CompletedProcess:
    ensure_tools()
    return subprocess.run(
        [str(KUBECONFORM), "-strict", "-summary", "-kubernetes-version", version or VERSIONS["K8S_VERSION_MIN"],
         "-schema-location", f"{SCHEMAS}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
         "-schema-location", f"{SCHEMAS}/crds/{{{{ .Group }}}}/{{{{ .ResourceKind }}}}_{{{{ .ResourceAPIVersion }}}}.json",
         *map(str, paths)],
        capture_output=True, text=True,
    )


def test_catalog_matches_the_declarations_in_assets():
    committed = (CHART / "catalog.yaml").read_text()
    assert committed == render_chart_catalog(ROOT / "assets"), "helm/kappa/catalog.yaml is stale: run `make helm-catalog`"


def test_k8s_manifests_are_rendered_from_the_chart_and_the_runner(tmp_path):
    ensure_tools()
    env = {**os.environ, "HELM": str(TOOLS / "bin" / "helm"), "PYTHON": str(ROOT / ".venv" / "bin" / "python")}
    subprocess.run(["bash", "tools/k8s-manifests.sh", str(tmp_path)], cwd=ROOT, env=env, check=True, capture_output=True)
    for f in sorted(tmp_path.iterdir()):
        assert (ROOT / "k8s" / f.name).read_text() == f.read_text(), f"k8s/{f.name} is stale: run `make k8s-manifests`"
    assert sorted(p.name for p in (ROOT / "k8s").glob("*.yaml")) == sorted(p.name for p in tmp_path.iterdir())


def test_k8s_holds_an_example_sparkapplication_for_one_streaming_asset():
    (app,) = [d for f in (ROOT / "k8s").glob("sparkapplication-*.yaml") for d in yaml.safe_load_all(f.read_text()) if d]
    assert app["kind"] == "SparkApplication" and app["spec"]["arguments"][:2] == ["--asset", "flights_bronze"]


def test_strict_validation_accepts_the_rendered_chart_and_rejects_an_unknown_field(tmp_path):
    objs = render()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump_all(objs))
    proc = kubeconform(good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Valid: {len(objs)}, Invalid: 0, Errors: 0, Skipped: 0" in proc.stdout
    # one misspelt field in each kind of schema source must fail: core, Strimzi, Spark operator
    for kind, mutate in [
        ("NetworkPolicy", lambda o: o["spec"].__setitem__("podSelectr", {})),
        ("KafkaUser", lambda o: o["spec"]["authorization"]["acls"][0].__setitem__("operation", "All") or o["spec"]["authorization"]["acls"][0].__setitem__("bogus", 1)),
        ("Kafka", lambda o: o["spec"]["kafka"]["listeners"][0].__setitem__("plaintext", True)),
        ("KafkaConnect", lambda o: o["spec"]["build"]["plugins"][0]["artifacts"][0].__setitem__("artefact", "x")),
        ("KafkaConnector", lambda o: o["spec"].__setitem__("tasksMaximum", 1)),
    ]:
        obj = copy.deepcopy([o for o in objs if o["kind"] == kind][0])
        mutate(obj)
        bad = tmp_path / f"bad-{kind}.yaml"
        bad.write_text(yaml.safe_dump(obj))
        proc = kubeconform(bad)
        assert proc.returncode != 0 and "additional properties" in proc.stdout, (kind, proc.stdout)


def test_strict_validation_fails_for_a_kind_without_schema(tmp_path):
    bad = tmp_path / "unknown.yaml"
    bad.write_text("apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaWidget\nmetadata: {name: x}\n")
    proc = kubeconform(bad)
    assert proc.returncode != 0 and "could not find schema" in proc.stdout


def test_every_value_is_documented():
    """Every leaf of values.yaml has a `# --` comment on it or on an enclosing key (helm-docs)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented_indent: list[int] = []  # indents of enclosing documented keys
    comment = False
    undocumented = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = True
            continue
        if stripped.startswith("#") or not stripped:
            continue
        m = re.match(r"^(\s*)(- )?([A-Za-z0-9_.-]+):(.*)$", line)
        if not m:
            continue
        indent = len(m.group(1)) + (2 if m.group(2) else 0)
        while documented_indent and documented_indent[-1] >= indent:
            documented_indent.pop()
        nxt = next((l for l in lines[i + 1:] if l.strip() and not l.strip().startswith("#")), "")
        is_parent = not m.group(4).strip() and len(nxt) - len(nxt.lstrip()) > indent
        if comment:
            documented_indent.append(indent)
        elif not documented_indent and not is_parent:
            undocumented.append(m.group(3))
        comment = False
    assert undocumented == []


def test_values_schema_rejects_unknown_keys():
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])


def test_spark_operator_values_use_only_keys_the_pinned_chart_declares():
    ensure_tools()
    upstream = yaml.safe_load((TOOLS / f"spark-operator-{UPSTREAM['SPARK_OPERATOR_VERSION']}" / "upstream" / "values.yaml").read_text())
    ours = yaml.safe_load((ROOT / "helm" / "values" / "spark-operator.yaml").read_text())

    def check(mine, theirs, path):
        for k, v in mine.items():
            assert k in theirs, f"{'.'.join(path + [k])} is not a value of the spark-operator chart"
            opaque = k.lower().endswith("securitycontext") or k in ("resources", "labels", "annotations")
            if isinstance(v, dict) and isinstance(theirs[k], dict) and theirs[k] and not opaque:
                check(v, theirs[k], path + [k])

    check(ours, upstream, [])


def test_pinned_versions_agree_across_files():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["kappa.dev/requires-strimzi"] == UPSTREAM["STRIMZI_VERSION"]
    assert chart["annotations"]["kappa.dev/requires-spark-operator"] == UPSTREAM["SPARK_OPERATOR_VERSION"]
    assert chart["annotations"]["kappa.dev/requires-dagster"] == UPSTREAM["DAGSTER_VERSION"]
    lock = (ROOT / "requirements.lock").read_text()
    assert re.search(rf"^dagster=={re.escape(UPSTREAM['DAGSTER_VERSION'])} \\$", lock, re.M)
    assert re.search(rf"<strimzi.version>{re.escape(UPSTREAM['STRIMZI_VERSION'])}<", (ROOT / "tools/strimzi-crds/pom.xml").read_text())
    assert chart["kubeVersion"] == f">={VERSIONS['K8S_VERSION_MIN']}-0"


def test_deploy_script_installs_operators_then_kappa_then_dagster_with_pinned_versions():
    proc = subprocess.run(["bash", "tools/deploy.sh"], cwd=ROOT, env={**os.environ, "DRY_RUN": "1"},
                          capture_output=True, text=True, check=True)
    cmds = [l for l in proc.stdout.splitlines() if l.startswith("+ ")]
    order = [next(name for name in ("000-Namespace", "strimzi-kafka-operator", "spark-operator", "helm/kappa", "dagster") if name in c)
             for c in cmds if "kubectl -n" not in c]
    assert order == ["000-Namespace", "strimzi-kafka-operator", "spark-operator", "helm/kappa", "dagster"]
    text = proc.stdout
    assert f"--version {UPSTREAM['STRIMZI_VERSION']}" in text
    assert f"--version {UPSTREAM['SPARK_OPERATOR_VERSION']}" in text
    assert f"--version {UPSTREAM['DAGSTER_VERSION']}" in text
    assert "namespace.create=false" in text


def test_dockerfile_is_multi_stage_and_runs_as_non_root():
    text = (ROOT / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 3
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert "/opt/kappa/bin/entrypoint.py" in text  # the runner's mainApplicationFile
    assert "jvm/spark/pom.xml" in text  # the same Maven-resolved jars as local runs


def test_the_supply_chain_is_pinned_by_content_not_only_by_version():
    """Issue 23 item 6: every Python requirement carries its hashes and is installed with
    --require-hashes (here and in the image); Go builds never rewrite go.mod/go.sum
    (-mod=readonly: a module whose sum is not the recorded one fails); Maven fails on a checksum
    mismatch (-C) rather than warning."""
    lock = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\-\[\]]+==\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock, re.M)
    requirements = [l for l in lock.splitlines() if l and not l.startswith(("#", " "))]
    assert len(pins) == len(requirements) > 150
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "Dockerfile").read_text()
    assert "--require-hashes -r requirements.lock" in makefile
    assert "--require-hashes -r /src/requirements.lock" in dockerfile
    # issue 40 item 6: the build backend is the lock's hashed setuptools (no isolated build env that
    # would fetch pyproject's [build-system] requires unpinned), at a version past CVE-2024-6345
    # (fixed in 70.0.0) and CVE-2025-47273 (fixed in 78.1.1)
    (setuptools,) = re.findall(r"^setuptools==(\S+) \\$", lock, re.M)
    assert tuple(int(p) for p in setuptools.split(".")) >= (78, 1, 1)
    assert re.search(rf'^requires = \["setuptools=={re.escape(setuptools)}"\]$', (ROOT / "pyproject.toml").read_text(), re.M)
    (project,) = [l for l in makefile.splitlines() if l.rstrip().endswith(" -e .")]
    assert "--no-build-isolation" in project and "--no-deps" in project
    (image,) = [l for l in dockerfile.splitlines() if l.startswith("RUN ") and l.endswith(" /src")]
    assert "--no-build-isolation" in image and "--no-deps" in image
    go_envs = [l for f in ("cluster.mk", "k8s.mk", "objectstore.mk") for l in (ROOT / "tools" / f).read_text().splitlines()
               if "GOFLAGS=" in l]
    assert go_envs and all("GOFLAGS=-mod=readonly" in l for l in go_envs)
    assert re.search(r"^MVN := mvn .*-C ", makefile, re.M)
    assert dockerfile.count("mvn -q -B -C ") == dockerfile.count("mvn ")
    # every base image by digest: each FROM names a build argument whose default is image@sha256:…,
    # and no BuildKit frontend image is pulled by tag (`# syntax=`)
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M))
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    external = [f for f in froms if f.startswith("${")]
    assert len(external) == len(froms) == 3
    for ref in external:
        assert re.fullmatch(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}", defaults[ref[2:-1]]), ref
    assert not re.search(r"^# *syntax=", dockerfile, re.M)
