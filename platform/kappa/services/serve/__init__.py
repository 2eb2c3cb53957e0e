"""The SQL endpoint: Spark's Thrift JDBC/ODBC server (HiveServer2 protocol) over promoted tables.

``kappa serve`` starts one long-lived Spark driver that runs ``HiveThriftServer2`` (it ships in the
pyspark package's jars) and keeps the catalog in step with the promotion registry:

* every asset with a promoted version is a view named after the asset (its stable name) in
  schema ``default``, over the version's Delta table registered as ``kappa.<asset>_v<N>`` and read
  at its pinned snapshot; ``quarantine`` and ``late_events`` too;
* the dbt marts (Delta tables under ``<warehouse>/_dbt/``) are registered as tables in schema
  ``analytics`` (dbt's) when the endpoint starts, so they survive a restart of it (while it runs,
  dbt itself creates them in its catalog);
* a background loop polls the registry's Delta version every :data:`POLL_S` seconds and, when it
  moved, replaces the views; the registry version it has applied is written to the state file.
  :meth:`kappa.delta.registry.Registry.promote` waits for that acknowledgement, so once a promotion
  or rollback returns, the next query through the endpoint reads the new version.

Any HiveServer2 client connects: ``beeline -u jdbc:hive2://127.0.0.1:10000/default``, PyHive,
dbt-spark (``method: thrift``), JDBC/ODBC BI tools. By default authentication is NONE (SASL PLAIN,
any user name and password) and the server binds to 127.0.0.1: a local developer endpoint; it
refuses to bind any other address without a password file (:func:`check_exposure`). With a password
file (``kappa serve --auth FILE`` or ``KAPPA_SERVE_PASSWORD_FILE``; salted hashes written by ``kappa
serve user add``, see :mod:`kappa.services.serve_users`) it is HiveServer2's CUSTOM authentication
with :data:`AUTH_CLASS` (``jvm/serve-auth``), which refuses any other user or password and locks a
name out for a while after repeated failures; the Kubernetes chart always runs it so, with the file
mounted from a Secret. State (pid file, state JSON, the server's log) lives in
``<KAPPA_HOME>/serve``.

Every statement is held to an allow-list: :data:`GUARD_CLASS` (``jvm/sql-guard``), a Spark session
extension, admits queries made of allow-listed operators (:data:`OPERATORS_PATH`) and built-in
functions (:data:`kappa.core.sql_functions.TABLE_PATH`) over the catalog's tables, read-only
commands, and writes only from a login whose role in the password file is ``dbt``
(:mod:`kappa.services.serve_users`), only in ``analytics`` with a location under
``<warehouse>/_dbt``; variable substitution and path reads are off and a session that changes a
setting off a short list is refused; the error names the rule (``kappa sql guard: <rule>: …``). Only
the endpoint's own session, which keeps the catalog in step, is exempt. The endpoint's process
starts with an allow-listed environment (:func:`endpoint_env`) and reads its object-store keys from
files (:func:`read_object_store_keys`).

This module is the client side (start, stop, status, connect, the state file); the endpoint's own
process, what ``python -m kappa.services.serve`` runs, is :mod:`kappa.services.serve.process`.

Sources: Spark docs, "Distributed SQL Engine" (Thrift JDBC/ODBC server, ``hive.server2.thrift.*``);
Delta docs, "Table batch reads and writes" (``delta.`path``` identifiers).
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kappa.core import processes
from kappa.core.sql_functions import TABLE_PATH
from kappa.config import Settings, join
from kappa.core.service import LocalService, ServiceStatus
from kappa.errors import KappaError
from kappa.delta.registry import Registry
from kappa.services.serve_users import read_password_file, verify_password

DEFAULT_PORT = 10000  # HiveServer2's registered port
DEFAULT_HOST = "127.0.0.1"
#: Seconds between two looks at the registry's Delta version.
POLL_S = 0.25
#: HiveServer2 CUSTOM authentication provider checking logins against the salted hashes of the file
#: named by ``KAPPA_SERVE_PASSWORD_FILE`` (jvm/serve-auth; the jar is build/jars/serve/kappa-serve-auth.jar).
AUTH_CLASS = "dev.kappa.serve.PasswordFileAuthenticator"
#: The endpoint's statement policy, a Spark session extension (jvm/sql-guard; the jar is
#: build/jars/serve/kappa-sql-guard.jar): read-only except in :data:`DBT_SCHEMA`, see :func:`server_conf`.
GUARD_CLASS = "dev.kappa.serve.ReadOnlySqlGuard"
#: The guard's table of Spark's logical operators (``kappa/resources/sql_operators.json``): which may
#: make up a query, which commands any login may run, which writes dbt's login may make.
OPERATORS_PATH = TABLE_PATH.parent / "sql_operators.json"
#: The schema dbt builds its models in (``dbt/profiles.yml``), the only one a login may write in.
DBT_SCHEMA = "analytics"
#: The schema of the tables the stable names' views read (one per promoted version, plus
#: ``quarantine`` and ``late_events``); only the endpoint itself writes its catalog entries.
INTERNAL_SCHEMA = "kappa"


class ServeError(KappaError, RuntimeError):
    """The SQL endpoint cannot be started, stopped or reached; the message says why."""


@dataclass
class ServeStatus(ServiceStatus):
    """The SQL endpoint as ``kappa serve status`` reports it: ``up`` (ready, with the promoted tables
    registered), where it listens and its JDBC URL, pid, state folder and log, the registry version
    and tables it serves, and its authentication."""
    up: bool
    host: str
    port: int
    jdbc_url: str
    pid: int | None
    state_dir: str
    log_file: str
    #: The registry's Delta version the endpoint's catalog reflects (None before the first sync).
    registry_version: int | None = None
    #: What the endpoint serves: stable name (a view in ``default``) -> its SQL; ``analytics.<mart>``
    #: and ``kappa.<asset>_v<N>`` (the tables the views read) -> Delta path.
    tables: dict[str, str] | None = None
    #: HiveServer2 authentication: ``NONE`` (any user) or ``CUSTOM`` (the password file).
    auth: str = "NONE"
    #: The password file the endpoint checks logins against (``CUSTOM`` only).
    password_file: str | None = None
    #: The endpoint speaks TLS (HiveServer2 SSL, ``KAPPA_SERVE_TLS_KEYSTORE``): clients connect with
    #: ``ssl=true`` (JDBC), :func:`connect` with ``tls``, dbt with ``use_ssl``.
    tls: bool = False

    def summary(self) -> list[str]:
        """The JDBC URL, pid, authentication, the tables served and the log (plain text)."""
        login = f"user and password from {self.password_file}" if self.auth == "CUSTOM" else "no password"
        transport = "TLS" if self.tls else "plain TCP"
        return [f"at {self.jdbc_url} (pid {self.pid or '-'}, {self.auth} authentication, {transport}); "
                f"log: {self.log_file}",
                f"tables: {', '.join(served_names(self.tables)) or 'nothing promoted yet'}",
                f"connect: beeline -u {self.jdbc_url}   (any HiveServer2/JDBC/ODBC client, {login})"]


def served_names(tables: dict[str, str] | None) -> list[str]:
    """The names a user queries, sorted: the stable names and the dbt marts (``analytics.<mart>``),
    not the version tables behind the views."""
    return sorted(n for n in tables or {} if not n.startswith(f"{INTERNAL_SCHEMA}."))


def jdbc_url(host: str, port: int, tls: bool = False) -> str:
    """The HiveServer2 JDBC URL of an endpoint at ``host``:``port`` (database ``default``); with
    ``tls`` the Hive JDBC driver's ``ssl=true`` (add ``sslTrustStore=…`` for a private CA)."""
    return f"jdbc:hive2://{host}:{port}/default" + (";ssl=true" if tls else "")


#: The Hadoop/Hive configuration key of the TLS keystore's password. Set in the running driver's
#: Hadoop configuration (:func:`kappa.services.serve.process.serve_forever`), never as a Spark
#: conf: those are spark-submit arguments, which any local user can read in the process table.
KEYSTORE_PASSWORD_KEY = "hive.server2.keystore.password"


def tls_keystore(settings: Settings) -> tuple[Path, str] | None:
    """The endpoint's TLS keystore and its password: ``(KAPPA_SERVE_TLS_KEYSTORE, the text of
    KAPPA_SERVE_TLS_PASSWORD_FILE without its line end)``; None when no keystore is set (plain
    TCP). Raises :class:`ServeError` naming the variable when the keystore or the password file is
    missing, or the password file is empty."""
    if settings.serve_tls_keystore is None:
        return None
    keystore = Path(settings.serve_tls_keystore).resolve()
    if not keystore.is_file():
        raise ServeError(f"KAPPA_SERVE_TLS_KEYSTORE: {keystore} is not a file (a PKCS12 keystore with the "
                         "endpoint's key and certificate, e.g. from `keytool -genkeypair -storetype PKCS12`)")
    if settings.serve_tls_password_file is None:
        raise ServeError("KAPPA_SERVE_TLS_PASSWORD_FILE is not set: the endpoint's TLS keystore "
                         f"{keystore} needs the file that holds its password")
    secret = Path(settings.serve_tls_password_file)
    try:
        password = secret.read_text().rstrip("\r\n")
    except OSError as exc:
        raise ServeError(f"KAPPA_SERVE_TLS_PASSWORD_FILE: cannot read {secret}: {exc.strerror}") from exc
    if not password:
        raise ServeError(f"KAPPA_SERVE_TLS_PASSWORD_FILE: {secret} is empty")
    return keystore, password


def connect(host: str, port: int, user: str | None = None, password: str | None = None, *,
            tls: bool = False, ca_file: Path | str | None = None, database: str = "default",
            configuration: dict[str, str] | None = None):
    """A DB-API connection (PyHive) to the endpoint at ``host``:``port``: SASL PLAIN, with
    ``user``/``password`` when given (the endpoint's CUSTOM authentication) or any user name
    otherwise; ``configuration``: HiveServer2 session settings (PyHive's). With ``tls`` the socket
    is TLS and the endpoint's certificate is verified, host name included, against ``ca_file`` (PEM; default the system's certificate authorities). Raises
    PyHive's/Thrift's errors (``TTransportException``) when the connection or the login fails;
    :class:`ServeError` when the TLS handshake fails (a certificate that does not verify, an
    endpoint without TLS), naming the reason."""
    from pyhive import hive

    if not tls:
        return hive.connect(host=host, port=port, username=user or "kappa", password=password,
                            auth="CUSTOM" if password is not None else "NONE", database=database,
                            configuration=configuration)
    import thrift_sasl
    from pyhive.sasl_compat import PureSASLClient as SASLClient
    from thrift.transport.TSSLSocket import TSSLSocket

    context = verified_context(host, port, ca_file)
    sock = TSSLSocket(host, port, ssl_context=context)
    transport = thrift_sasl.TSaslClientTransport(
        lambda: SASLClient(host, mechanism="PLAIN", username=user or "kappa", password=password or "x"),
        "PLAIN", sock)
    return hive.connect(thrift_transport=transport, database=database, configuration=configuration)


def verified_context(host: str, port: int, ca_file: Path | str | None = None):
    """An ``ssl.SSLContext`` that verifies the endpoint's certificate, host name included, against
    ``ca_file`` (PEM; default the system's certificate authorities), after one TLS handshake with
    the endpoint at ``host``:``port`` succeeded with it. Raises :class:`ServeError` naming the reason
    when the handshake fails (a certificate that does not verify, an endpoint without TLS) or the
    endpoint does not answer; ``ca_file`` that cannot be read fails the same way. (Thrift's
    TSSLSocket logs a failed handshake and then fails on a closed handle: shaking hands here first
    lets the error say why.)"""
    import socket
    import ssl

    trust = f"the certificates of {ca_file}" if ca_file else "the system's certificate authorities"
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except OSError as exc:
        raise ServeError(f"KAPPA_SERVE_TLS_CA_FILE: cannot read {ca_file}: {exc.strerror or exc}") from exc
    try:
        with socket.create_connection((host, port), timeout=30) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            pass
    except ssl.SSLError as exc:
        raise ServeError(f"TLS with the SQL endpoint at {host}:{port} failed ({exc}); its certificate is "
                         f"checked against {trust}") from exc
    except OSError as exc:
        raise ServeError(f"the SQL endpoint at {host}:{port} does not answer: {exc}") from exc
    return context


def beeline_path() -> str:
    """Hive's ``beeline`` shell as the pyspark package ships it (needs Java)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    return str(Path(spec.origin).parent / "bin" / "beeline")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches only this machine: ``localhost`` or a loopback address
    (127.0.0.0/8, ::1). Any other name or address (``0.0.0.0``, a host name) counts as exposed."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, password_file: Path | str | None) -> None:
    """Raise :class:`ServeError` when the endpoint would bind a non-loopback ``host`` without a
    password file: HiveServer2's NONE authentication lets in any user name with any password."""
    if password_file is None and not is_loopback(host):
        raise ServeError(f"kappa serve --host {host} without a password file would let anyone who reaches "
                         f"{host} read every table: give --auth FILE (or KAPPA_SERVE_PASSWORD_FILE; "
                         f"`kappa serve user add NAME --file FILE` writes it) or bind 127.0.0.1")


def _serve_jar(settings: Settings, module: str) -> Path:
    """``build/jars/serve/kappa-<module>.jar``, built from ``jvm/<module>``. Raises
    :class:`ServeError` when it has not been built."""
    assert settings.jars_dir is not None
    jar = settings.jars_dir / "serve" / f"kappa-{module}.jar"
    if not jar.is_file():
        raise ServeError(f"{jar} is missing: build it with `make install` "
                         f"(mvn -s jvm/settings.xml -f jvm/{module}/pom.xml package)")
    return jar


def auth_jar(settings: Settings) -> Path:
    """``build/jars/serve/kappa-serve-auth.jar`` (the :data:`AUTH_CLASS`); see :func:`_serve_jar`."""
    return _serve_jar(settings, "serve-auth")


def guard_jar(settings: Settings) -> Path:
    """``build/jars/serve/kappa-sql-guard.jar`` (the :data:`GUARD_CLASS`); see :func:`_serve_jar`."""
    return _serve_jar(settings, "sql-guard")


def client_credentials(settings: Settings, st: "ServeStatus") -> tuple[str, str] | None:
    """(user, password) a Kappa client (``kappa dbt``) logs in with: ``KAPPA_SERVE_USER`` and
    ``KAPPA_SERVE_PASSWORD``; None when the endpoint needs no password. The file holds only salted
    hashes, so there is no password to take from it. Raises :class:`ServeError` when they are not
    set, or when the endpoint's password file is readable here and the password is not the user's
    there (before the endpoint counts a failed login against the user)."""
    if st.auth != "CUSTOM":
        return None
    where = f" ({st.password_file})" if st.password_file else ""
    if not (settings.serve_user and settings.serve_password):
        raise ServeError(f"kappa serve checks passwords{where}: set KAPPA_SERVE_USER and KAPPA_SERVE_PASSWORD "
                         f"to a user of its password file and that user's password")
    if st.password_file and Path(st.password_file).is_file():
        stored = read_password_file(st.password_file).get(settings.serve_user)
        if stored is None or not verify_password(settings.serve_password, stored):
            raise ServeError(f"KAPPA_SERVE_USER/KAPPA_SERVE_PASSWORD are not a user and password of "
                             f"{st.password_file}")
    return settings.serve_user, settings.serve_password


def marts_root(settings: Settings) -> Path | str:
    """``<warehouse>/_dbt``: where dbt writes its marts (dbt-spark ``location_root``)."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_dbt")


def _paths(settings: Settings) -> dict[str, Path]:
    assert settings.home is not None
    d = settings.home / "serve"
    return {"dir": d, "pid": d / "serve.pid", "state": d / "state.json", "log": d / "serve.log"}


def _read_state(settings: Settings) -> dict:
    try:
        return json.loads(_paths(settings)["state"].read_text())
    except (OSError, ValueError):
        return {}


def _write_state(settings: Settings, state: dict) -> None:
    path = _paths(settings)["state"]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def running_pid(settings: Settings) -> int | None:
    """The endpoint's pid if its process is alive, else None (a stale pid file is removed)."""
    return processes.running_pid(_paths(settings)["pid"])


def status(settings: Settings) -> ServeStatus:
    """Whether this state dir's endpoint runs and answers, where, and what it serves."""
    state = _read_state(settings)
    pid = running_pid(settings)
    host, port = state.get("host", DEFAULT_HOST), int(state.get("port", DEFAULT_PORT))
    paths = _paths(settings)
    return ServeStatus(
        up=pid is not None and bool(state.get("ready")) and state.get("pid") == pid,
        host=host, port=port, jdbc_url=jdbc_url(host, port, bool(state.get("tls"))), pid=pid,
        state_dir=str(paths["dir"]), log_file=str(paths["log"]), registry_version=state.get("registry_version"),
        tables=state.get("tables"), auth=state.get("auth", "NONE"), password_file=state.get("password_file"),
        tls=bool(state.get("tls")),
    )


def start(settings: Settings, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, timeout_s: float = 180.0,
          password_file: Path | str | None = None) -> ServeStatus:
    """Start the endpoint in the background and wait until it accepts connections with every
    promoted table registered. With ``password_file`` (default ``settings.serve_password_file``)
    only its users log in (:func:`read_password_file`). Raises :class:`ServeError` if ``host`` is
    not loopback and there is no password file (:func:`check_exposure`), it already runs, the port
    is taken, the authentication jar is missing, or it exits or is not ready within ``timeout_s``
    seconds (with the tail of its log); :class:`~kappa.services.serve_users.PasswordFileError` when
    the password file is missing or malformed (a plain-text line included)."""
    password_file = password_file or settings.serve_password_file
    check_exposure(host, password_file)
    if password_file is not None:
        password_file = Path(password_file).resolve()
        read_password_file(password_file)
        auth_jar(settings)
    tls_keystore(settings)  # a missing keystore or password file fails here, naming the variable
    paths = _paths(settings)
    pid = running_pid(settings)
    if pid is not None:
        st = status(settings)
        raise ServeError(f"kappa serve already runs (pid {pid}) at {st.jdbc_url}; `kappa serve stop` stops it")
    if processes.port_in_use(port, host):
        raise ServeError(f"port {port} is already in use on {host}; choose another with `kappa serve --port P`")
    paths["dir"].mkdir(parents=True, exist_ok=True)
    paths["state"].unlink(missing_ok=True)
    keys = object_store_keys(settings, os.environ)
    keys_dir = write_object_store_keys(paths["dir"] / "object-store-keys", keys) if keys else None
    env = endpoint_env(settings, os.environ, password_file, keys_dir)
    # start_new_session (in spawn): Ctrl-C in the calling shell must not stop the endpoint
    proc = processes.spawn([sys.executable, "-m", "kappa.services.serve", "--host", host, "--port", str(port)],
                           paths["log"], paths["pid"], env=env)
    processes.wait_ready(proc, lambda: status(settings).up, what="kappa serve", log=paths["log"],
                         timeout_s=timeout_s, error=ServeError, pid_file=paths["pid"], poll_s=0.3, grace_s=10)
    return status(settings)


#: Variables of the caller's environment the endpoint process keeps (none holds a secret): what
#: Python, the JVM and Spark need to start, and the object store's region. Every other one (a
#: writer's ``AWS_*`` keys, ``KAPPA_SERVE_PASSWORD``, database passwords) stays out: a statement
#: that could read the server's environment would find nothing worth having.
ENV_ALLOWED = ("PATH", "HOME", "JAVA_HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH",
               "VIRTUAL_ENV", "SPARK_LOCAL_IP", "PYSPARK_PYTHON", "AWS_REGION")
#: The settings the endpoint process reads, passed as their ``KAPPA_*`` variables. Not
#: ``spark_driver_jit``: its ``c1`` is for drivers that live a minute, and the endpoint runs for
#: hours, every dbt build's SQL in its JVM (the C1-only JIT the tests' processes inherit had
#: doubled the analysts' tests that go through it: tests/analytics/test_dbt.py 138 -> 281 s).
ENV_SETTINGS = ("project_dir", "home", "warehouse", "checkpoints", "assets_dir", "jars_dir", "spark_driver_memory",
                "shuffle_partitions", "delta_snapshot_partitions", "spark_ui", "spark_ui_port",
                "s3_endpoint", "s3_path_style_access", "serve_tls_keystore", "serve_tls_password_file", "verbose")
#: The two files of an object-store keys folder (:data:`kappa.config.Settings.serve_object_store_keys`).
KEY_FILES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def endpoint_env(settings: Settings, base: Mapping[str, str], password_file: Path | str | None,
                 keys_dir: Path | None = None) -> dict[str, str]:
    """The environment of the endpoint process :func:`start` spawns, built from an allow-list: the
    :data:`ENV_ALLOWED` variables of ``base`` (the caller's), the :data:`ENV_SETTINGS` of
    ``settings`` as ``KAPPA_*`` (paths resolved), the password file as given and, with
    ``keys_dir``, ``KAPPA_SERVE_OBJECT_STORE_KEYS`` naming the folder of its object-store keys
    (:func:`write_object_store_keys`). No secret: never an ``AWS_ACCESS_KEY_ID`` or
    ``AWS_SECRET_ACCESS_KEY``, whoever calls."""
    env = {k: base[k] for k in ENV_ALLOWED if base.get(k)}
    for name in ENV_SETTINGS:
        value = getattr(settings, name)
        if value is None:
            continue
        if name in ("serve_tls_keystore", "serve_tls_password_file"):
            value = Path(value).resolve()
        env[f"KAPPA_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    if password_file is not None:
        env["KAPPA_SERVE_PASSWORD_FILE"] = str(password_file)
    if keys_dir is not None:
        env["KAPPA_SERVE_OBJECT_STORE_KEYS"] = str(keys_dir)
    return env


def object_store_keys(settings: Settings, base: Mapping[str, str]) -> dict[str, str] | None:
    """The object-store keys a local endpoint runs with: ``KAPPA_SERVE_AWS_*`` (its own identity,
    ``kappa objectstore``'s read-only account) when set, else the caller's ``AWS_*`` from ``base``;
    None when neither has both keys (a warehouse in a local folder needs none)."""
    if settings.serve_aws_access_key_id and settings.serve_aws_secret_access_key:
        return dict(zip(KEY_FILES, (settings.serve_aws_access_key_id, settings.serve_aws_secret_access_key)))
    if all(base.get(k) for k in KEY_FILES):
        return {k: base[k] for k in KEY_FILES}
    return None


def write_object_store_keys(folder: Path, keys: Mapping[str, str]) -> Path:
    """Write ``keys`` (:data:`KEY_FILES`) as one file each in ``folder`` (mode 0700; files 0600,
    created so, never readable by others for an instant); returns ``folder``."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    for name in KEY_FILES:
        path = folder / name
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(keys[name])
    return folder


def read_object_store_keys(settings: Settings) -> dict[str, str] | None:
    """The keys of ``settings.serve_object_store_keys`` (:data:`KEY_FILES`, each file's text without
    its line end); None when it is not set. Raises :class:`ServeError` naming the file when one is
    missing or empty."""
    folder = settings.serve_object_store_keys
    if folder is None:
        return None
    keys = {}
    for name in KEY_FILES:
        try:
            keys[name] = (Path(folder) / name).read_text().strip()
        except OSError as exc:
            raise ServeError(f"KAPPA_SERVE_OBJECT_STORE_KEYS: cannot read {Path(folder) / name}: {exc.strerror}") from exc
        if not keys[name]:
            raise ServeError(f"KAPPA_SERVE_OBJECT_STORE_KEYS: {Path(folder) / name} is empty")
    return keys


def stop(settings: Settings, grace_s: float = 30.0) -> int:
    """Stop the endpoint (SIGTERM, SIGKILL after ``grace_s`` s); returns its pid. Raises
    :class:`ServeError` when it is not running."""
    pid = running_pid(settings)
    if pid is None:
        raise ServeError(f"kappa serve is not running (state dir {_paths(settings)['dir']})")
    processes.terminate(pid, grace_s)
    _paths(settings)["pid"].unlink(missing_ok=True)
    _paths(settings)["state"].unlink(missing_ok=True)
    return pid


def await_in_step(settings: Settings, timeout_s: float = 30.0) -> bool:
    """Wait until a running endpoint has applied the registry as it is now (called after every
    promotion commit); returns False at once when no endpoint runs. Raises :class:`ServeError` if
    it runs but has not caught up within ``timeout_s`` seconds."""
    if running_pid(settings) is None or not _read_state(settings).get("ready"):
        return False
    target = registry_version(settings)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        applied = _read_state(settings).get("registry_version")
        if applied is not None and target is not None and applied >= target:
            return True
        if running_pid(settings) is None:
            return False
        time.sleep(0.05)
    raise ServeError(f"kappa serve has not applied registry version {target} within {timeout_s:.0f} s; "
                     f"see {_paths(settings)['log']}")


def registry_version(settings: Settings) -> int | None:
    """The registry table's current Delta version, or None when it does not exist yet."""
    return RegistryWatch(settings).version()


class RegistryWatch:
    """The registry table's current Delta version, read again and again at little cost: the table
    is opened (its log replayed from the last checkpoint) once; then each :meth:`version` looks
    for the next commit's file only (``_delta_log/<version + 1, 20 digits>.json``: Delta writes
    commit N+1 as that one file, put-if-absent; Delta protocol, "Delta Log Entries") and reads the
    new commits (delta-rs ``update_incremental``) when it is there. Measured with the endpoint idle
    (`kappa serve`, 20 s, a 395-commit registry 95 commits past its checkpoint), the endpoint's
    Python process: 11 % of a core opening the table four times a second, 1.4 % with
    ``update_incremental`` at every look, 0.15 % looking for the next file first."""

    def __init__(self, settings: Settings):
        from kappa.core.storage import filesystem, join

        registry = Registry(settings)
        self.path, self.settings = registry.path, settings
        self.fs, self.log = filesystem(join(registry.path, "_delta_log"), settings)
        self.table = None

    def version(self) -> int | None:
        """The newest Delta version of the registry (None: no registry table yet)."""
        from pyarrow.fs import FileType

        from kappa.delta.tables import is_table, open_table

        if self.table is None:
            if not is_table(self.path, self.settings):
                return None
            self.table = open_table(self.path, self.settings)
        elif self.fs.get_file_info(f"{self.log}/{self.table.version() + 1:020d}.json").type != FileType.NotFound:
            self.table.update_incremental()
        return self.table.version()


def remote(settings: Settings, port: int | None = None, timeout_s: float = 5.0) -> ServeStatus:
    """The endpoint another process runs at ``KAPPA_SERVE_HOST`` (``settings.serve_host``) on
    ``port`` (default ``settings.serve_port``): on Kubernetes the chart's ``kappa-serve`` Service.
    Nothing is started; ``up`` once a TCP connection to it opens within ``timeout_s`` seconds. Its
    authentication is ``CUSTOM``: an endpoint reachable from another host always checks passwords
    (:func:`start` refuses a non-loopback host without a password file, the chart always mounts
    one), so clients log in with ``KAPPA_SERVE_USER``/``KAPPA_SERVE_PASSWORD``
    (:func:`client_credentials`). Raises :class:`ServeError` when ``serve_host`` is not set or
    nothing answers there."""
    import socket

    if not settings.serve_host:
        raise ServeError("KAPPA_SERVE_HOST is not set: no endpoint runs elsewhere")
    host, port = settings.serve_host, port or settings.serve_port
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ServeError(f"the SQL endpoint at {host}:{port} (KAPPA_SERVE_HOST, KAPPA_SERVE_PORT) does not answer "
                         f"within {timeout_s:g} s: {exc}") from exc
    return ServeStatus(up=True, host=host, port=port, jdbc_url=jdbc_url(host, port, settings.serve_tls), pid=None,
                       state_dir="", log_file="", auth="CUSTOM", tls=settings.serve_tls)


class ServeService(LocalService):
    """The SQL endpoint (``kappa serve``) as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "serve", "kappa serve", 300.0
    help = "The SQL endpoint (Spark Thrift Server, HiveServer2 protocol) over promoted tables."
    stop, status = staticmethod(stop), staticmethod(status)

    def start(self, settings: Settings, timeout_s: float, port: int | None = None) -> ServeStatus:
        """:func:`start` on ``port`` (default ``settings.serve_port``: ``KAPPA_SERVE_PORT`` or 10000);
        raises :class:`ServeError` if it cannot start."""
        return start(settings, port=port or settings.serve_port, timeout_s=timeout_s)


SERVICE = ServeService()
