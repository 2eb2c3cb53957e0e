"""`kappa serve` (the Spark Thrift Server) and `kappa.tables` over promoted tables, on real parts."""

from __future__ import annotations

import json
import re
import stat
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import SERVE_PASSWORD, SERVE_USER, hive_connect, hive_count, kappa

pytestmark = pytest.mark.integration


def test_serve_status_gives_host_port_and_jdbc_url(served):
    settings, port = served
    status = json.loads(kappa(settings, "serve", "status", "--format", "json").stdout)
    assert status["up"] and status["host"] == "127.0.0.1" and status["port"] == port
    assert status["jdbc_url"] == f"jdbc:hive2://127.0.0.1:{port}/default;ssl=true" and status["tls"] is True
    assert {"flights", "weather", "departures_hourly", "quarantine"} <= set(status["tables"])
    assert status["auth"] == "CUSTOM" and status["password_file"] == str(settings.home / "serve-passwords")


def test_only_a_user_of_the_password_file_with_its_password_logs_in(served):
    """HiveServer2 CUSTOM authentication with Kappa's password-file provider (jvm/serve-auth)."""
    from thrift.transport.TTransport import TTransportException

    settings, port = served
    for user, password in ((SERVE_USER, "wrong"), (SERVE_USER, SERVE_PASSWORD + "x"), ("mallory", SERVE_PASSWORD),
                           (SERVE_USER, SERVE_PASSWORD.split(":")[0])):
        with pytest.raises(TTransportException, match="(?i)authentication|sasl|error"):
            hive_connect(port, user, password)
    assert hive_count(port, "flights") > 0  # the right one: rows


def test_the_endpoint_speaks_only_tls_with_the_certificate_its_clients_verify(served):
    """HiveServer2 SSL (`kappa serve --tls-keystore`): a plain-TCP client gets no session, a TLS
    client that does not trust the endpoint's certificate stops at the handshake, saying why, and
    the keystore's password is nowhere in the endpoint's command line."""
    from thrift.transport.TTransport import TTransportException

    from kappa.services.serve import ServeError, connect, status

    settings, port = served
    with pytest.raises(TTransportException):  # the server reads a plain SASL start as a bad TLS record
        connect("127.0.0.1", port, SERVE_USER, SERVE_PASSWORD).close()
    with pytest.raises(ServeError, match="certificate verify failed.*system's certificate authorities"):
        connect("127.0.0.1", port, SERVE_USER, SERVE_PASSWORD, tls=True).close()
    assert hive_count(port, "flights") > 0  # verified against its certificate: rows
    password = (settings.home / "serve-tls" / "serve.p12.password").read_text().strip()
    cmdline = Path(f"/proc/{status(settings).pid}/cmdline").read_bytes()
    children = subprocess.run(["pgrep", "-a", "-P", str(status(settings).pid)], capture_output=True, text=True).stdout
    assert password.encode() not in cmdline and password not in children and "serve.p12" in children


def test_kappa_dbt_reaches_the_endpoint_only_when_its_certificate_verifies(served):
    """dbt-spark's `use_ssl` logs in to whatever answers (its Thrift SSL transport uses CERT_NONE):
    an impostor would get dbt's password and serve it any rows. `kappa dbt` hands dbt a loopback
    relay that speaks TLS with the certificate checked (kappa.services.tls_relay): without a CA
    that trusts the endpoint's certificate it stops before dbt starts, saying why; with it, dbt
    connects and logs in (`dbt debug`)."""
    settings, _port = served
    refused = kappa(settings, "dbt", "debug", unset=("KAPPA_SERVE_TLS_CA_FILE",), timeout=300)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "certificate verify failed" in said and "system's certificate authorities" in said
    assert "Running with dbt=" not in said, said  # dbt never started
    trusted = kappa(settings, "dbt", "debug", timeout=300)
    assert trusted.returncode == 0 and "All checks passed" in trusted.stdout, trusted.stdout + trusted.stderr
    assert "OK connection ok" in trusted.stdout


def login_seconds(port: int, user: str, password: str) -> tuple[bool, float]:
    """(logged in?, seconds) of one PyHive connection (SASL PLAIN) as ``user``; a login that
    succeeds is closed at once."""
    from thrift.transport.TTransport import TTransportException

    started = time.perf_counter()
    try:
        hive_connect(port, user, password).close()
        return True, time.perf_counter() - started
    except TTransportException:
        return False, time.perf_counter() - started


def test_the_password_file_holds_salted_hashes_only(served):
    settings, _ = served
    passwords = settings.home / "serve-passwords"
    text = passwords.read_text()
    assert SERVE_PASSWORD not in text and SERVE_PASSWORD.split(":")[0] not in text
    lines = text.splitlines()
    assert lines[0].startswith(f"{SERVE_USER}:")
    for line in lines:  # other tests add users: every line is a salted hash all the same
        assert re.fullmatch(r"[^:]+:pbkdf2_sha256\$600000\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=(:dbt)?", line), line
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600


def _median_standard_error(xs: list[float]) -> float:
    """The standard error of the median of ``xs`` (seconds), from their median absolute deviation
    (1.4826 MAD estimates the standard deviation of normal noise; the median's standard error is
    1.2533 of the mean's), robust to the few slow outliers a shared machine adds."""
    centre = statistics.median(xs)
    mad = statistics.median(abs(x - centre) for x in xs)
    return 1.2533 * 1.4826 * mad / len(xs) ** 0.5


def test_a_wrong_password_and_an_unknown_user_are_refused_in_the_same_time(served):
    """Users added with `kappa serve user add` to the running endpoint's file (applied at the next
    login, no restart); then rounds of one wrong password of a known user and one unknown user,
    back to back in alternating order, so the machine's load (2 shared cores) weighs on both alike.

    What the check costs is measured here (a refusal minus one during a lock-out, which skips the
    check); the median per-round difference must stay within a tolerance: a quarter of that cost,
    or four standard errors of the median difference when the machine is noisier. A refusal that
    skipped the hash for unknown users would differ by the whole cost, so the tolerance must be
    under half of it: batches of rounds are added (each known name fails at most 4 times, under the
    lock-out's 5) until it is, and the test fails as "cannot tell" if it never is."""
    settings, port = served
    passwords = settings.home / "serve-passwords"
    names, batches, tag = 8, 4, uuid.uuid4().hex[:6]
    for i in range(names):
        added = kappa(settings, "serve", "user", "add", f"timing{tag}{i}", "--file", str(passwords), stdin=f"pw-{i}\n")
        assert added.returncode == 0, added.stderr
    assert login_seconds(port, f"timing{tag}0", "pw-0")[0]  # a right login: the new file applies; warms the JIT

    locked = f"locked{tag}"
    for _ in range(5):  # an unknown name, locked out like a known one
        assert not login_seconds(port, locked, "x")[0]
    locked_at, unchecked = time.monotonic(), []
    while time.monotonic() < locked_at + 1.5:  # refusals well inside the 2 s lock-out, not checked
        ok, seconds = login_seconds(port, locked, "x")
        assert not ok
        if time.monotonic() < locked_at + 1.8:
            unchecked.append(seconds)
    assert len(unchecked) >= 3, f"refusals during the lock-out took {unchecked} s: too slow here to measure"

    wrong, unknown = [], []
    for batch in range(batches):
        for i in range(names):
            attempts = [(wrong, f"timing{tag}{i}"), (unknown, f"nobody{tag}{batch}x{i}")]
            for samples, user in attempts if (batch * names + i) % 2 == 0 else attempts[::-1]:
                ok, seconds = login_seconds(port, user, "not-the-password")
                assert not ok
                samples.append(seconds)
        gaps = [u - w for u, w in zip(unknown, wrong)]
        check_s = statistics.median(wrong + unknown) - statistics.median(unchecked)
        gap_s = statistics.median(gaps)
        tolerance_s = max(0.25 * check_s, 4 * _median_standard_error(gaps), 0.005)
        print(f"\nafter {len(gaps)} rounds, login refusals, s: wrong password median {statistics.median(wrong):.3f}; "
              f"unknown user median {statistics.median(unknown):.3f}; median per-round gap {gap_s:+.3f} "
              f"(tolerance {tolerance_s:.3f}); unchecked (locked out) {[round(x, 3) for x in unchecked]}; "
              f"the check costs {check_s:.3f}")
        if check_s > 2 * tolerance_s:
            break
    assert check_s > 2 * tolerance_s, "too noisy here to tell a refusal that skips the check from one that does not"
    assert abs(gap_s) <= tolerance_s


def test_failed_logins_lock_the_name_out_for_a_doubling_window_even_for_the_right_password(served):
    """The lock-out of PasswordFileAuthenticator: after 5 failures 2 s, after the 6th 4 s; during
    it the right password is refused without a check (fast); after it, logs in and clears."""
    from kappa.services.serve_users import add_user

    settings, port = served
    user = f"backoff{uuid.uuid4().hex[:6]}"
    add_user(settings.home / "serve-passwords", user, "right-one")

    def fail_until_locked() -> tuple[float, float]:
        """(when the 5th failure returned, median seconds of a checked refusal)"""
        checked = [login_seconds(port, user, "wrong") for _ in range(5)]
        assert not any(ok for ok, _ in checked)
        return time.monotonic(), statistics.median(s for _, s in checked)

    assert login_seconds(port, user, "right-one")[0]  # the file applies
    locked_at, checked_s = fail_until_locked()
    during = [login_seconds(port, user, "right-one") for _ in range(3)]
    unchecked_s = statistics.median(s for _, s in during)
    # Not checked: faster (connection and TLS handshake are most of it where the check is cheap).
    assert not any(ok for ok, _ in during) and unchecked_s < 0.75 * checked_s, (unchecked_s, checked_s)
    time.sleep(max(0.0, locked_at + 2.3 - time.monotonic()))
    assert login_seconds(port, user, "right-one")[0]  # the 2 s are over; the failures are cleared

    locked_at, _ = fail_until_locked()  # 2 s again (cleared), then a 6th failure: 4 s
    time.sleep(max(0.0, locked_at + 2.3 - time.monotonic()))
    assert not login_seconds(port, user, "wrong")[0]
    sixth_at = time.monotonic()
    time.sleep(2.3)
    assert not login_seconds(port, user, "right-one")[0]  # 2.3 s into 4 s: still locked out
    time.sleep(max(0.0, sixth_at + 4.3 - time.monotonic()))
    assert login_seconds(port, user, "right-one")[0]
    log = (settings.home / "serve" / "serve.log").read_text()
    print(f"\nchecked refusal {checked_s:.3f} s, refusal during the lock-out {unchecked_s:.3f} s")
    assert f"user {user} is locked out for" in log, "the endpoint's log does not say why"


@pytest.mark.parametrize("second_line, message", [
    ("no-colon-here", "line 2 is not `user:pbkdf2_sha256"),
    ("legacy:opensesame", "line 2 (user 'legacy'): a plain-text password (or an unknown scheme): only salted "
                          "hashes are accepted; set it with `kappa serve user add legacy --file "),
], ids=["malformed", "plain text"])
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
    # --only: the downstream tables stay over v1 (a promotion alone would refuse to split the cut)
    refused = kappa(settings, "promote", "flights", str(v2.version))
    assert refused.returncode == 1 and "--only" in refused.stderr and "Traceback" not in refused.stderr
    promoted = kappa(settings, "promote", "flights", str(v2.version), "--only")
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
