"""Local background services: the KRaft broker, the Kafka Connect worker, the SQL endpoint and the
control plane's processes. One way to start, watch and stop them.

Each service is a detached process (its own session, so Ctrl-C in the calling shell does not reach
it) writing stdout and stderr to a log file, with a pid file in its state directory. ``start``
functions spawn it, wait until a readiness probe answers (failing early, with the log's tail, when
the process exits), and ``stop`` sends SIGTERM, then SIGKILL after a grace period.

Errors are raised as the caller's own :class:`~kappa.errors.KappaError` subclass, so `kappa kafka`,
`kappa connect` and `kappa serve` each keep their error type.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kappa.errors import KappaError


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited process its parent has not
    reaped still answers ``kill(pid, 0)``; its state in ``/proc/<pid>/stat`` is ``Z``)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` cannot be bound (another process listens on it), checked before a
    service starts so the error names the port rather than the service's own log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it: bind to port 0). Another process may take
    it before the caller binds it; callers start their server right away."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive, else None (a stale pid file is removed)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file, or ``(no log at <path>)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def spawn(cmd: Sequence[str], log: Path, pid_file: Path | None = None,
          env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` detached (new session, stdin from /dev/null), appending stdout and stderr to
    ``log``; write its pid to ``pid_file``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env) if env is not None else None, start_new_session=True)
    if pid_file is not None:
        pid_file.write_text(str(proc.pid))
    return proc


def wait_ready(proc: subprocess.Popen, ready: Callable[[], bool], *, what: str, log: Path, timeout_s: float,
               error: type[KappaError], pid_file: Path | None = None, poll_s: float = 0.5,
               grace_s: float = 5.0) -> None:
    """Poll ``ready()`` until it is true. Raises ``error`` (with the last lines of ``log``) when the
    process exits first, or when ``timeout_s`` seconds pass (the process is then stopped); the pid
    file is removed in both cases."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
            raise error(f"{what} exited with code {proc.returncode} while starting; last lines of {log}:\n"
                        f"{log_tail(log)}")
        if ready():
            return
        if time.monotonic() > deadline:
            terminate(proc.pid, grace_s)
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
            raise error(f"{what} was not ready within {timeout_s:.0f} s; last lines of {log}:\n{log_tail(log)}")
        time.sleep(poll_s)


def terminate(pid: int, grace_s: float, group: bool = False) -> None:
    """SIGTERM ``pid`` (its whole process group when ``group``: a service that started children of
    its own), wait up to ``grace_s`` seconds, then SIGKILL. Returns once it is gone or killed."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        send(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)


def kill(pid: int) -> None:
    """SIGKILL ``pid`` (fault injection: no clean shutdown) and wait until it is gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while pid_alive(pid):
        _reap(pid)
        time.sleep(0.05)


def stop_from_pid_file(pid_file: Path, not_running: Exception, *, grace_s: float = 30.0, sigkill: bool = False) -> int:
    """Stop the process ``pid_file`` names: SIGTERM, then SIGKILL after ``grace_s`` seconds
    (:func:`terminate`), or SIGKILL at once with ``sigkill`` (fault injection); remove the pid file
    and return the pid. Raises ``not_running`` (the caller's :class:`~kappa.errors.KappaError`) when
    no live process is recorded there."""
    pid = running_pid(pid_file)
    if pid is None:
        raise not_running
    if sigkill:
        kill(pid)
    else:
        terminate(pid, grace_s)
    pid_file.unlink(missing_ok=True)
    return pid


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our child (else a zombie would look alive)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
