"""The local object store: a real S3-compatible server (Versity's ``versitygw``, POSIX backend) on
loopback, started and stopped like the broker, so tables, checkpoints and the registry can live at
``s3a://<bucket>/…`` on this machine as they do on a cluster.

``kappa objectstore start`` runs ``build/tools/bin/versitygw`` (built from its Go module by
``make objectstore-tools``, version in ``tools/versions.env``) on ``<KAPPA_OBJECTSTORE_HOST>:<KAPPA_OBJECTSTORE_PORT>`` (loopback unless set)
over the folder ``<KAPPA_HOME>/objectstore/data`` (each sub-folder is a bucket, each file an object;
metadata such as ETags in extended attributes), creates the bucket (``KAPPA_OBJECTSTORE_BUCKET``)
and reports in its status the variables that point every command at it::

    eval "$(kappa objectstore status --format json | python -c \\
        'import json,sys; [print(f"export {k}={v}") for k, v in json.load(sys.stdin)["env"].items()]')"

``env`` holds ``KAPPA_WAREHOUSE=s3a://<bucket>/warehouse``, ``KAPPA_CHECKPOINTS``,
``KAPPA_S3_ENDPOINT`` and ``KAPPA_S3_PATH_STYLE_ACCESS`` (read by :mod:`kappa.config`), the standard
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_REGION`` that Spark's S3A connector, delta-rs
and pyarrow read, and ``AWS_ENDPOINT_URL``/``AWS_ALLOW_HTTP`` for delta-rs and other AWS SDK clients
(DuckDB, boto3) that take the endpoint from the environment.

Credentials are never in code: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` when both are
set at start, else random ones generated at the first start; either way they are kept in
``<state>/credentials`` (mode 0600, ``KEY=value`` lines) and handed to the server through its
environment (``ROOT_ACCESS_KEY_ID``/``ROOT_SECRET_ACCESS_KEY``), never on its command line.

**The SQL endpoint's identity.** The server keeps accounts (versitygw's internal IAM,
``--iam-dir <state>/iam``). At start, Kappa creates one more account, of role ``user`` (no bucket of
its own, nothing by default), with random keys kept in ``<state>/serve-credentials`` (0600), and
sets the bucket's policy (:func:`serve_policy`): that account may list the bucket, read every object
under ``warehouse/`` and write and delete only under ``warehouse/_dbt/`` (dbt's marts,
:func:`kappa.services.serve.marts_root`). The status's ``env`` carries those keys as
``KAPPA_SERVE_AWS_ACCESS_KEY_ID``/``KAPPA_SERVE_AWS_SECRET_ACCESS_KEY``, which ``kappa serve`` starts
the endpoint with: it reads every promoted table and cannot change a table, a checkpoint or the
registry, even through a statement its SQL guard let pass. The account is created through
versitygw's admin API (``PATCH /create-user``) and the policy with S3's ``PutBucketPolicy``, both
signed with AWS Signature Version 4 by botocore.

Sources: versitygw's ``cmd/versitygw/main.go`` and ``cmd/internal/gwcli/posix.go`` (flags and their
environment variables), ``cmd/internal/gwcli/admin.go`` (``create-user``: an ``Account`` as XML,
SigV4 with service ``s3``) and ``auth/bucket_policy*.go`` (the policy grammar it evaluates); AWS S3
API reference, "PutObject" (``If-None-Match: *``, 412 Precondition Failed), which versitygw's POSIX
backend implements (``checkPutPreconditions``), and "PutBucketPolicy"; IAM, "Policies and
permissions in Amazon S3" (actions ``s3:ListBucket``, ``s3:GetObject``, ``s3:PutObject``,
``s3:DeleteObject``, resources ``arn:aws:s3:::<bucket>/<prefix>*``).
"""

from __future__ import annotations

import json
import os
import secrets
import xml.sax.saxutils
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kappa.config import Settings, aws_environment
from kappa.core import processes
from kappa.core.service import LocalService, ServiceStatus
from kappa.errors import KappaError

#: The server's executable under ``build/tools/bin`` (``make objectstore-tools``).
BINARY = "versitygw"
#: Where versitygw answers an unauthenticated GET when it is ready (its ``--health`` flag).
HEALTH_PATH = "/health"
DEFAULT_REGION = "us-east-1"


class ObjectStoreError(KappaError, RuntimeError):
    """The local object store cannot be started, stopped or reached; the message says why."""


@dataclass
class ObjectStoreStatus(ServiceStatus):
    """The local object store as ``kappa objectstore status`` reports it: ``up`` (the server answers
    its health check), its S3 ``endpoint`` (path-style), ``region`` and ``bucket``, and ``env``: the
    variables to export so that every command (Kappa, Spark, delta-rs, pyarrow, DuckDB) uses it.
    ``env`` is empty until the first start (no credentials yet)."""

    up: bool
    endpoint: str
    region: str
    bucket: str
    env: dict[str, str]
    pid: int | None
    server: str
    state_dir: str
    data_dir: str
    log_file: str
    credentials_file: str

    def summary(self) -> list[str]:
        """Endpoint, bucket, pid and log; then how to point the shell at it (plain text)."""
        lines = [f"at {self.endpoint} (bucket {self.bucket}, region {self.region}, {self.server}, "
                 f"pid {self.pid or '-'}); log: {self.log_file}"]
        if self.env:
            lines.append(f"use it: export the `env` of `kappa objectstore status --format json` "
                         f"(warehouse {self.env.get('KAPPA_WAREHOUSE')}; credentials in {self.credentials_file})")
        if self.env.get("KAPPA_SERVE_AWS_ACCESS_KEY_ID"):
            lines.append("`kappa serve` started with that env uses its own keys (reads the warehouse, writes only "
                         "its _dbt/)")
        return lines


def _paths(settings: Settings) -> dict[str, Path]:
    d = settings.objectstore_dir
    return {"dir": d, "data": d / "data", "pid": d / "objectstore.pid", "log": d / "objectstore.log",
            "credentials": d / "credentials", "serve_credentials": d / "serve-credentials", "iam": d / "iam"}


def binary(settings: Settings) -> Path:
    """``build/tools/bin/versitygw``. Raises :class:`ObjectStoreError` when it has not been built."""
    path = settings.project_dir / "build" / "tools" / "bin" / BINARY
    if not os.access(path, os.X_OK):
        raise ObjectStoreError(f"{path} is missing: run `make objectstore-tools` (builds versitygw with Go, once)")
    return path


def endpoint(settings: Settings) -> str:
    """``http://<KAPPA_OBJECTSTORE_HOST>:<KAPPA_OBJECTSTORE_PORT>``: the server's S3 endpoint (plain
    HTTP; loopback by default)."""
    return f"http://{settings.objectstore_host}:{settings.objectstore_port}"


def read_credentials(settings: Settings, which: str = "credentials") -> dict[str, str]:
    """The ``KEY=value`` lines of ``<state>/credentials`` (the root's), or of
    ``<state>/serve-credentials`` with ``which="serve_credentials"`` ({} when there is none yet)."""
    try:
        text = _paths(settings)[which].read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def _random_keys(prefix: str) -> dict[str, str]:
    # versitygw, like S3, takes any printable access key; these match AWS's lengths (20, 40).
    return {"AWS_ACCESS_KEY_ID": (prefix + secrets.token_hex(10).upper())[:20],
            "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30)[:40]}


def _write_private(path: Path, comment: str, pairs: dict[str, str]) -> None:
    """``KEY=value`` lines under a comment, created 0600 (never readable by others, not even for
    an instant), then renamed into place."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"# {comment}\n")
        f.writelines(f"{k}={v}\n" for k, v in pairs.items())
    os.replace(tmp, path)


def _write_credentials(settings: Settings) -> dict[str, str]:
    """The credentials the server starts with, written to ``<state>/credentials`` (0600): the
    ``AWS_*`` environment's when both keys are set, else the file's, else new random ones."""
    env = aws_environment()
    if "AWS_ACCESS_KEY_ID" in env and "AWS_SECRET_ACCESS_KEY" in env:
        creds = env
    else:
        creds = read_credentials(settings) or _random_keys("KAPPA")
    creds = {"AWS_ACCESS_KEY_ID": creds["AWS_ACCESS_KEY_ID"],
             "AWS_SECRET_ACCESS_KEY": creds["AWS_SECRET_ACCESS_KEY"],
             "AWS_REGION": env.get("AWS_REGION") or creds.get("AWS_REGION") or DEFAULT_REGION}
    _write_private(_paths(settings)["credentials"], "kappa objectstore: the local server's root credentials "
                   "(keep private)", creds)
    return creds


def _serve_credentials(settings: Settings, region: str) -> dict[str, str]:
    """The SQL endpoint's keys: ``<state>/serve-credentials``, made random at the first start."""
    creds = read_credentials(settings, "serve_credentials") or _random_keys("KAPPASERVE")
    creds = {"AWS_ACCESS_KEY_ID": creds["AWS_ACCESS_KEY_ID"],
             "AWS_SECRET_ACCESS_KEY": creds["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": region}
    _write_private(_paths(settings)["serve_credentials"], "kappa objectstore: the SQL endpoint's credentials "
                   "(read the warehouse, write only dbt's location; keep private)", creds)
    return creds


def serve_policy(bucket: str, access_key: str) -> dict:
    """The bucket policy (IAM policy grammar, version 2012-10-17) that gives the account
    ``access_key`` what the SQL endpoint needs and nothing more: ``s3:ListBucket`` on the bucket,
    ``s3:GetObject`` under ``warehouse/``, and ``s3:PutObject``, ``s3:DeleteObject`` and the
    multipart-upload actions only under ``warehouse/_dbt/`` (where dbt writes its marts). The
    checkpoints and every table, the registry included, stay read-only or unreachable to it."""
    arn = f"arn:aws:s3:::{bucket}"
    who = {"AWS": [access_key]}
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "EndpointListsTheBucket", "Effect": "Allow", "Principal": who,
         "Action": ["s3:ListBucket"], "Resource": [arn]},
        {"Sid": "EndpointReadsTheWarehouse", "Effect": "Allow", "Principal": who,
         "Action": ["s3:GetObject"], "Resource": [f"{arn}/warehouse/*"]},
        {"Sid": "EndpointWritesOnlyDbtsLocation", "Effect": "Allow", "Principal": who,
         "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
         "Resource": [f"{arn}/warehouse/_dbt/*"]},
    ]}


def _signed(settings: Settings, creds: dict[str, str], method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request to the server (S3 API or versitygw's admin API), signed with AWS Signature
    Version 4 for service ``s3`` by botocore; (HTTP status, body)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=endpoint(settings) + path, data=body)
    S3SigV4Auth(Credentials(creds["AWS_ACCESS_KEY_ID"], creds["AWS_SECRET_ACCESS_KEY"]), "s3",
                creds.get("AWS_REGION", DEFAULT_REGION)).add_auth(request)
    prepared = request.prepare()
    req = urllib.request.Request(prepared.url, data=body if body else None, method=method,
                                 headers=dict(prepared.headers.items()))
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _ensure_serve_identity(settings: Settings, root: dict[str, str]) -> dict[str, str]:
    """The SQL endpoint's account (created unless it exists) and the bucket's policy for it (set
    at every start). Raises :class:`ObjectStoreError` with the server's answer when either fails."""
    serve = _serve_credentials(settings, root["AWS_REGION"])
    esc = xml.sax.saxutils.escape
    account = (f"<Account><Access>{esc(serve['AWS_ACCESS_KEY_ID'])}</Access><Secret>{esc(serve['AWS_SECRET_ACCESS_KEY'])}"
               "</Secret><Role>user</Role><UserID>0</UserID><GroupID>0</GroupID><ProjectID>0</ProjectID></Account>")
    code, body = _signed(settings, root, "PATCH", "/create-user", account.encode())
    if code >= 300 and b"XAdminUserExists" not in body:  # 409 when a restart finds it
        raise ObjectStoreError(f"creating the SQL endpoint's account at {endpoint(settings)} failed "
                               f"(HTTP {code}): {body.decode(errors='replace')[:500]}")
    bucket = settings.objectstore_bucket
    policy = json.dumps(serve_policy(bucket, serve["AWS_ACCESS_KEY_ID"])).encode()
    code, body = _signed(settings, root, "PUT", f"/{bucket}?policy", policy)
    if code >= 300:
        raise ObjectStoreError(f"setting the policy of bucket {bucket} at {endpoint(settings)} failed "
                               f"(HTTP {code}): {body.decode(errors='replace')[:500]}")
    return serve


def client_env(settings: Settings, creds: dict[str, str], serve: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that point Kappa, Spark, delta-rs and pyarrow at the server with ``creds``,
    and ``kappa serve`` with ``serve``'s keys (the endpoint's account) when given."""
    url, bucket = endpoint(settings), settings.objectstore_bucket
    endpoint_keys = {"KAPPA_SERVE_AWS_ACCESS_KEY_ID": serve["AWS_ACCESS_KEY_ID"],
                     "KAPPA_SERVE_AWS_SECRET_ACCESS_KEY": serve["AWS_SECRET_ACCESS_KEY"]} if serve else {}
    return {
        "KAPPA_WAREHOUSE": f"s3a://{bucket}/warehouse",
        "KAPPA_CHECKPOINTS": f"s3a://{bucket}/checkpoints",
        "KAPPA_S3_ENDPOINT": url,
        "KAPPA_S3_PATH_STYLE_ACCESS": "true",
        "AWS_ACCESS_KEY_ID": creds["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": creds["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": creds.get("AWS_REGION", DEFAULT_REGION),
        # delta-rs (object_store) and AWS SDKs read the endpoint here; object_store refuses plain
        # HTTP unless told (the server speaks plain HTTP, on loopback unless KAPPA_OBJECTSTORE_HOST).
        "AWS_ENDPOINT_URL": url,
        "AWS_ALLOW_HTTP": "true",
        **endpoint_keys,
    }


def running_pid(settings: Settings) -> int | None:
    """The server's pid if its process is alive, else None (a stale pid file is removed)."""
    return processes.running_pid(_paths(settings)["pid"])


def _healthy(settings: Settings, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(endpoint(settings) + HEALTH_PATH, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def status(settings: Settings) -> ObjectStoreStatus:
    """Whether this state dir's server runs and answers, where, and the env that uses it."""
    paths = _paths(settings)
    pid = running_pid(settings)
    creds = read_credentials(settings)
    serve = read_credentials(settings, "serve_credentials")
    return ObjectStoreStatus(
        up=pid is not None and _healthy(settings), endpoint=endpoint(settings),
        region=creds.get("AWS_REGION", DEFAULT_REGION), bucket=settings.objectstore_bucket,
        env=client_env(settings, creds, serve) if creds else {}, pid=pid, server=BINARY, state_dir=str(paths["dir"]),
        data_dir=str(paths["data"]), log_file=str(paths["log"]), credentials_file=str(paths["credentials"]),
    )


def _ensure_bucket(settings: Settings, creds: dict[str, str]) -> None:
    """Create the bucket unless it exists (S3 CreateBucket, through pyarrow's S3 client)."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(access_key=creds["AWS_ACCESS_KEY_ID"], secret_key=creds["AWS_SECRET_ACCESS_KEY"],
                           region=creds["AWS_REGION"], endpoint_override=f"{settings.objectstore_host}:{settings.objectstore_port}",
                           scheme="http", allow_bucket_creation=True)
    bucket = settings.objectstore_bucket
    try:
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            fs.create_dir(bucket)
    except OSError as err:
        raise ObjectStoreError(f"creating bucket {bucket} at {endpoint(settings)} failed: {err}") from err


def start(settings: Settings, timeout_s: float = 30.0) -> ObjectStoreStatus:
    """Start the server in the background, wait until it answers, create the bucket.

    Raises :class:`ObjectStoreError` if it already runs, the port is taken, the binary is missing,
    or it exits or is not ready within ``timeout_s`` seconds (with the tail of its log)."""
    paths = _paths(settings)
    pid = running_pid(settings)
    if pid is not None:
        raise ObjectStoreError(f"the object store already runs (pid {pid}) at {endpoint(settings)}; "
                               "`kappa objectstore stop` stops it")
    if processes.port_in_use(settings.objectstore_port, str(settings.objectstore_host)):
        raise ObjectStoreError(f"port {settings.objectstore_port} is already in use on {settings.objectstore_host}; choose another "
                               "with KAPPA_OBJECTSTORE_PORT")
    exe = binary(settings)
    paths["data"].mkdir(parents=True, exist_ok=True)
    creds = _write_credentials(settings)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(paths["dir"])),
           "ROOT_ACCESS_KEY_ID": creds["AWS_ACCESS_KEY_ID"], "ROOT_SECRET_ACCESS_KEY": creds["AWS_SECRET_ACCESS_KEY"]}
    paths["iam"].mkdir(mode=0o700, exist_ok=True)
    cmd = [str(exe), "--port", f"{settings.objectstore_host}:{settings.objectstore_port}", "--region", creds["AWS_REGION"],
           "--health", HEALTH_PATH, "--quiet", "--iam-dir", str(paths["iam"]), "posix", str(paths["data"])]
    proc = processes.spawn(cmd, paths["log"], paths["pid"], env=env)
    processes.wait_ready(proc, lambda: _healthy(settings), what="the object store (versitygw)", log=paths["log"],
                         timeout_s=timeout_s, error=ObjectStoreError, pid_file=paths["pid"], poll_s=0.2)
    _ensure_bucket(settings, creds)
    _ensure_serve_identity(settings, creds)
    return status(settings)


def stop(settings: Settings, grace_s: float = 10.0) -> int:
    """Stop the server (SIGTERM, SIGKILL after ``grace_s`` s); returns its pid. Its objects and
    credentials stay. Raises :class:`ObjectStoreError` when it is not running."""
    return processes.stop_from_pid_file(
        _paths(settings)["pid"],
        ObjectStoreError(f"the object store is not running (state dir {settings.objectstore_dir})"), grace_s=grace_s)


class ObjectStoreService(LocalService):
    """The object store as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "objectstore", "object store", 30.0
    help = ("The local S3-compatible object store (versitygw over a folder, no containers); its status's "
            "`env` points Kappa, Spark, delta-rs and pyarrow at it.")
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)


SERVICE = ObjectStoreService()
