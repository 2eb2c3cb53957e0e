"""The Kappa image as `make image` builds it (tools/container/image.sh), inspected with podman: who
it runs as, what it must not carry (the build machine's CA certificates, compilers, Maven, a JDK),
that it holds exactly requirements.lock's Python packages, and that `kappa` and Kappa's entrypoint
run in it as uid 185 on a read-only root filesystem.

Marked ``cluster``: `make test` leaves these out (they need the image, ~8 min to build cold);
`make test-cluster` builds it and runs them. Without the image they fail, naming `make image`."""

from __future__ import annotations

import base64
import json
import mmap
import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
PODMAN = str(ROOT / "tools" / "container" / "podman.sh")
APP_VERSION = re.search(r'^appVersion: "?([^"\n]+)"?$', (ROOT / "helm/kappa/Chart.yaml").read_text(), re.M)[1]
IMAGE = os.environ.get("KAPPA_IMAGE", f"localhost/kappa/kappa:{APP_VERSION}")
#: The final stage's base: the Dockerfile's pinned PYTHON_IMAGE, or the local stand-in bases.sh builds.
BASES = ("localhost/kappa-base/python:3.11",
         "docker.io/library/" + re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)[1])
#: The build machine's own CA certificates (Debian's folder for local CAs).
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
#: Commands of a build toolchain that the runtime image must not have.
BUILD_TOOLS = ("gcc", "cc", "c++", "g++", "clang", "make", "cmake", "ld", "as", "mvn", "javac", "jar", "git")


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PODMAN, *args], capture_output=True, text=True, check=check, timeout=timeout)


def run(*cmd: str, entrypoint: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in a fresh container of the image: uid 185, read-only root filesystem, no network."""
    opts = ["--rm", "--read-only", "--user", "185:185", "--network", "none"]
    if entrypoint is not None:
        opts += ["--entrypoint", entrypoint]
    for k, v in (env or {}).items():
        opts += ["--env", f"{k}={v}"]
    return podman("run", *opts, IMAGE, *cmd, check=False)


@pytest.fixture(scope="module")
def image() -> dict:
    """``podman image inspect`` of the image; fails (not skips) when it was not built."""
    got = podman("image", "inspect", IMAGE, check=False)
    assert got.returncode == 0, f"no image {IMAGE}: build it with `make image` ({got.stderr.strip()})"
    return json.loads(got.stdout)[0]


@pytest.fixture(scope="module")
def rootfs(image):
    """The image's files, mounted read-only on the host (``podman image mount``)."""
    path = Path(podman("image", "mount", IMAGE).stdout.strip())
    yield path
    podman("image", "unmount", IMAGE, check=False)


def _pem_certs(text: str) -> list[bytes]:
    return [base64.b64decode("".join(m.split()))
            for m in re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)]


def test_runs_as_uid_185_not_root(image):
    assert image["Config"]["User"] == "185:185"
    # no --user: the image's own default
    got = podman("run", "--rm", "--read-only", "--network", "none", "--entrypoint", "/bin/sh", IMAGE, "-c", "id -u; id -g")
    assert got.stdout.split() == ["185", "185"]


def test_no_ca_certificate_of_the_build_machine_in_any_file(image, rootfs):
    """The machine's local CAs (mounted only while building, for the proxy) are nowhere in the image:
    not as PEM, not as DER (a Java keystore, a jar), and Java's trust store lists none; the image's
    CA bundle is the base image's."""
    host = [der for f in sorted(HOST_CA_DIR.glob("*.crt")) for der in _pem_certs(f.read_text())]
    assert host, f"no certificate in {HOST_CA_DIR}: nothing to look for"
    needles = [der for der in host] + [base64.b64encode(der)[64:128] for der in host]  # 2nd PEM line
    found = []
    for path in rootfs.rglob("*"):
        if not path.is_file() or path.is_symlink() or path.stat().st_size == 0:
            continue
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found += [str(path.relative_to(rootfs)) for n in needles if data.find(n) != -1]
    assert found == []
    fingerprints = {":".join(f"{b:02X}" for b in __import__("hashlib").sha256(der).digest()) for der in host}
    keytool = run("keytool", "-list", "-cacerts", "-storepass", "changeit", entrypoint="")
    assert keytool.returncode == 0 and "SHA-256" in keytool.stdout, keytool.stderr
    assert not [fp for fp in fingerprints if fp in keytool.stdout]
    # the image's PEM bundle holds the same certificates as its base image's (Debian's, nothing added)
    base = next((b for b in BASES if podman("image", "exists", b, check=False).returncode == 0), None)
    assert base, f"none of the base images {BASES} is here"
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    base_certs = podman("run", "--rm", "--network", "none", "--entrypoint", "cat", base, bundle).stdout
    assert set(_pem_certs((rootfs / bundle.lstrip("/")).read_text())) == set(_pem_certs(base_certs))


def test_no_build_tools(image):
    script = "for c in " + " ".join(BUILD_TOOLS) + "; do command -v $c || true; done; " \
             "dpkg-query -W -f '${Package}\\n' | grep -E '^((gcc|g\\+\\+|cpp)(-[0-9]+)?|make|maven|binutils|build-essential|openjdk-[0-9]+-jdk(-headless)?)$' || true"
    got = run("-c", script, entrypoint="/bin/bash")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == []


def test_the_locks_python_packages_at_the_locked_versions(image):
    lock = dict(re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", (ROOT / "requirements.lock").read_text(), re.M))
    norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731 (PEP 503 names)
    got = run("/opt/kappa/venv/bin/python", "-c",
              "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))",
              entrypoint="")
    assert got.returncode == 0, got.stderr
    installed = {norm(k): v for k, v in json.loads(got.stdout).items()}
    locked = {norm(k): v for k, v in lock.items()}
    assert len(locked) > 150
    assert {k: (v, installed.get(k)) for k, v in locked.items() if installed.get(k) != v} == {}
    # beyond the lock: Kappa itself and the venv's own pip only
    assert set(installed) - set(locked) <= {"kappa", "pip"}, set(installed) - set(locked)


def test_kappa_runs_as_uid_185_on_a_read_only_root(image):
    got = run("kappa", "--help")
    assert got.returncode == 0, got.stderr
    assert "usage" in got.stdout.lower()


@pytest.mark.parametrize("args, error", [
    ([], "no command"),
    (["executor"], "executor: environment variable SPARK_DRIVER_URL is not set"),
    (["executor", "extra"], "executor: takes no arguments"),
    (["driver", "--class", "x"], "driver: environment variable SPARK_DRIVER_BIND_ADDRESS is not set"),
])
def test_the_entrypoint_refuses_a_pod_without_sparks_settings(image, args, error):
    got = run(*args)
    assert got.returncode == 64, got
    assert got.stderr.startswith(f"kappa entrypoint: {error}") and got.stderr.count("\n") == 1, got.stderr


def test_executor_mode_starts_sparks_executor_backend_with_the_pods_jvm_options(image):
    """``executor`` as Spark's pod spec runs it: the backend class on the image's classpath, heap from
    SPARK_EXECUTOR_MEMORY, SPARK_JAVA_OPT_<i> in numeric order (10 after 2, so the last -D wins) and
    with their spaces kept, after a ``spark.master`` naming the pod's API server and the RPC key
    file as ``spark.authenticate.secret.file`` (without them the backend's first SecurityManager
    cannot read the key). The driver URL is unreachable (no network), so it exits after trying."""
    env = {"SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1", "SPARK_EXECUTOR_ID": "1",
           "SPARK_EXECUTOR_CORES": "1", "SPARK_EXECUTOR_MEMORY": "300m", "SPARK_APPLICATION_ID": "spark-test",
           "SPARK_EXECUTOR_POD_IP": "127.0.0.1", "SPARK_EXECUTOR_POD_NAME": "app-exec-1",
           "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "SPARK_JAVA_OPT_0": "-XshowSettings:properties", "SPARK_JAVA_OPT_1": "-Dkappa.probe=a b",
           "SPARK_JAVA_OPT_2": "-Dkappa.order=two", "SPARK_JAVA_OPT_10": "-Dkappa.order=ten",
           "SPARK_JAVA_OPT_3": "-Dspark.authenticate.secret.executor.file=/etc/kappa/spark-auth/secret"}
    got = run("executor", env=env)
    out = got.stdout + got.stderr
    assert "kappa.probe = a b" in out and "kappa.order = ten" in out, out[-3000:]
    assert "spark.master = k8s://https://10.96.0.1:443" in out, out[-3000:]
    assert "spark.authenticate.secret.file = /etc/kappa/spark-auth/secret" in out, out[-3000:]
    assert "sun.java.command = org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in out, out[-3000:]
    assert "ClassNotFoundException" not in out and "NoClassDefFoundError" not in out, out[-3000:]
    assert "spark://CoarseGrainedScheduler@127.0.0.1:1" in out and got.returncode != 0, out[-3000:]
