"""kappa.core.logs: librdkafka's log through Python logging into the process's log file (a real
confluent-kafka client, in a child process so that its stderr is its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A producer whose broker refuses the connection: librdkafka logs the refusal (level 3, FAIL)
# within a poll or two. Prints the log file the process wrote, if any.
CLIENT = """
import sys, time
from confluent_kafka import Producer
from kappa.core import logs
from kappa.config import load_settings
from kappa.harness.env import free_port

logs.route(load_settings(home=sys.argv[1], verbose=sys.argv[2] == "verbose"))
producer = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "logger": logs.LIBRDKAFKA})
deadline = time.monotonic() + (5 if sys.argv[2] == "verbose" else 20)  # verbose: never a log file
while time.monotonic() < deadline and logs.written_log() is None:
    producer.poll(0.2)
print(logs.written_log() or "")
"""


def run_client(home: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLIENT, str(home), mode], capture_output=True, text=True, timeout=60)


def test_librdkafka_logs_to_the_log_file_and_not_to_stderr(tmp_path):
    result = run_client(tmp_path, "quiet")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    log = Path(result.stdout.strip())
    assert log.parent == tmp_path / "logs" and log.name.startswith("kappa-")
    assert "kappa.librdkafka: FAIL" in log.read_text() and "Connection refused" in log.read_text()


def test_verbose_keeps_librdkafka_on_stderr(tmp_path):
    result = run_client(tmp_path, "verbose")
    assert result.returncode == 0 and result.stdout.strip() == ""
    assert "kappa.librdkafka: FAIL" in result.stderr and "Connection refused" in result.stderr
    assert not (tmp_path / "logs").exists()
