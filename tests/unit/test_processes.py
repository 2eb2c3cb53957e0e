"""kappa.core.processes: the one way local services are spawned, awaited and stopped (real processes)."""

from __future__ import annotations

import sys

import pytest

from kappa.core import processes
from kappa.errors import KappaError


class ServiceError(KappaError, RuntimeError):
    pass


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_spawned_service_is_found_by_its_pid_file_and_stopped_with_sigterm(tmp_path):
    pid_file, log = tmp_path / "svc.pid", tmp_path / "svc.log"
    proc = processes.spawn(_python("import time; print('up', flush=True); time.sleep(60)"), log, pid_file)
    processes.wait_ready(proc, lambda: "up" in log.read_text(), what="svc", log=log, timeout_s=30,
                         error=ServiceError, pid_file=pid_file, poll_s=0.05)
    assert processes.running_pid(pid_file) == proc.pid
    processes.terminate(proc.pid, grace_s=10)
    assert not processes.pid_alive(proc.pid)
    assert processes.running_pid(pid_file) is None and not pid_file.exists()  # the stale file is removed


def test_a_service_that_exits_while_starting_fails_with_its_code_and_log_tail(tmp_path):
    pid_file, log = tmp_path / "svc.pid", tmp_path / "svc.log"
    proc = processes.spawn(_python("print('port taken: boom'); raise SystemExit(3)"), log, pid_file)
    with pytest.raises(ServiceError, match=r"(?s)svc exited with code 3 while starting.*port taken: boom"):
        processes.wait_ready(proc, lambda: False, what="svc", log=log, timeout_s=30, error=ServiceError,
                             pid_file=pid_file, poll_s=0.05)
    assert not pid_file.exists()


def test_a_service_not_ready_in_time_is_stopped_and_reported(tmp_path):
    pid_file, log = tmp_path / "svc.pid", tmp_path / "svc.log"
    proc = processes.spawn(_python("import time; time.sleep(60)"), log, pid_file)
    with pytest.raises(ServiceError, match="svc was not ready within 1 s"):
        processes.wait_ready(proc, lambda: False, what="svc", log=log, timeout_s=1, error=ServiceError,
                             pid_file=pid_file, poll_s=0.05, grace_s=5)
    assert not processes.pid_alive(proc.pid) and not pid_file.exists()


def test_kill_is_immediate_and_a_missing_log_is_named(tmp_path):
    proc = processes.spawn(_python("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                   "time.sleep(60)"), tmp_path / "svc.log")
    processes.kill(proc.pid)
    assert not processes.pid_alive(proc.pid)
    assert processes.log_tail(tmp_path / "absent.log") == f"(no log at {tmp_path / 'absent.log'})"
