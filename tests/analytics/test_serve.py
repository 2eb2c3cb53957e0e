"""`kappa serve` (the Spark Thrift Server) and `kappa.tables` over promoted tables, on real parts."""

from __future__ import annotations

import json
import sys

import pytest

from .conftest import SERVE_PASSWORD, SERVE_USER, hive_count, kappa

pytestmark = pytest.mark.integration


def test_serve_status_gives_host_port_and_jdbc_url(served):
    settings, port = served
    status = json.loads(kappa(settings, "serve", "status", "--format", "json").stdout)
    assert status["up"] and status["host"] == "127.0.0.1" and status["port"] == port
    assert status["jdbc_url"] == f"jdbc:hive2://127.0.0.1:{port}/default"
    assert {"flights", "weather", "departures_hourly", "quarantine"} <= set(status["tables"])
    assert status["auth"] == "CUSTOM" and status["password_file"] == str(settings.home / "serve-passwords")


def test_only_a_user_of_the_password_file_with_its_password_logs_in(served):
    """HiveServer2 CUSTOM authentication with Kappa's password-file provider (jvm/serve-auth)."""
    from pyhive import hive
    from thrift.transport.TTransport import TTransportException

    settings, port = served
    for user, password in ((SERVE_USER, "wrong"), (SERVE_USER, SERVE_PASSWORD + "x"), ("mallory", SERVE_PASSWORD),
                           (SERVE_USER, SERVE_PASSWORD.split(":")[0])):
        with pytest.raises(TTransportException, match="(?i)authentication|sasl|error"):
            hive.connect(host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM")
    assert hive_count(port, "flights") > 0  # the right one: rows


@pytest.mark.parametrize("second_line, message", [
    ("no-colon-here", "line 2 is not `user:pbkdf2_sha256"),
    ("legacy:opensesame", "line 2 (user 'legacy'): a plain-text password (or an unknown scheme): only salted "
                          "hashes are accepted; set it with `kappa serve user add legacy --file "),
])
def test_serve_refuses_a_malformed_or_plain_text_password_file_naming_file_and_line(served, tmp_path, second_line,
                                                                                   message):
    from kappa.services.serve_users import add_user

    settings, port = served
    bad = tmp_path / "passwords"
    add_user(bad, "analyst", "ok", iterations=100_000)
    with bad.open("a") as f:
        f.write(second_line + "\n")
    refused = kappa(settings, "serve", "--port", str(port), "--auth", str(bad))
    assert refused.returncode == 1 and f"{bad}: {message}" in refused.stderr.replace("\n", ""), refused.stderr
    assert "Traceback" not in refused.stderr and "opensesame" not in refused.stderr


def test_a_second_serve_on_the_same_state_is_refused_clearly(served):
    settings, port = served
    again = kappa(settings, "serve", "--port", str(port))
    assert again.returncode == 1 and "already runs" in again.stderr and "Traceback" not in again.stderr


def test_query_through_serve_returns_the_promoted_count_and_follows_a_rollback(served):
    """A promotion and a rollback are visible to the very next query, without a restart."""
    from kappa.delta.registry import Registry

    from ..integration.helpers import table

    settings, port = served
    registry = Registry(settings)
    v1 = registry.promoted("flights")
    rows_v1 = len(table(settings, "flights", v1.version))
    assert hive_count(port, "flights") == rows_v1

    # v2: the same table with its first 100 rows only (a real Delta table, registered and promoted)
    from deltalake import DeltaTable, write_deltalake

    v2 = registry.create_version("flights", v1.fingerprint, v1.upstream, reason="test")
    write_deltalake(v2.table_path, DeltaTable(v1.table_path).to_pyarrow_table().slice(0, 100))
    registry.record("flights", v2.version, "gate_passed", checks=[])
    promoted = kappa(settings, "promote", "flights", str(v2.version))
    assert promoted.returncode == 0, promoted.stderr
    assert hive_count(port, "flights") == 100

    rolled = kappa(settings, "rollback", "flights")
    assert rolled.returncode == 0, rolled.stderr
    assert hive_count(port, "flights") == rows_v1


def test_tables_open_reads_the_promoted_version_without_spark(served, tmp_path):
    """`kappa.tables.open` in a process that never imports pyspark, read with DuckDB."""
    import subprocess

    settings, _ = served
    code = f"""
import sys, duckdb, kappa.tables
from kappa.config import load_settings
s = load_settings(home={str(settings.home)!r}, assets_dir={str(settings.assets_dir)!r})
dataset = kappa.tables.dataset("flights", s)
with duckdb.connect() as con:
    n = con.sql("SELECT count(*) FROM dataset").fetchall()[0][0]
print(n, kappa.tables.path("flights", s), "pyspark" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.split()
    from kappa.delta.registry import Registry

    from ..integration.helpers import table

    promoted = Registry(settings).promoted("flights")
    assert int(out[0]) == len(table(settings, "flights", promoted.version))
    assert out[1] == promoted.table_path
    assert out[2] == "False"
