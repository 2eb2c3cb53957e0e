"""The SQL endpoint's password file and authentication settings: the hash format written by Python
and verified by Python and by the endpoint's Java check (run in a JVM of its own, without the
Thrift server); the login itself is tested against the real endpoint in tests/analytics/test_serve.py."""

from __future__ import annotations

import base64
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from kappa.config import load_settings
from tests.kappa_cli import run_kappa
from kappa.services.serve import (AUTH_CLASS, GUARD_CLASS, ServeError, ServeStatus, check_exposure, client_credentials,
                                  is_loopback)
from kappa.services.serve.process import server_conf
from kappa.services.serve_users import (MIN_ITERATIONS, PasswordFileError, PasswordHash, add_user, hash_password,
                                        read_password_file, user_line, verify_password)

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"[^:]+:pbkdf2_sha256\$\d+\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=")
#: The cheapest cost the file accepts: these tests check the format, not the cost.
CHEAP = MIN_ITERATIONS


def test_a_line_is_a_salted_pbkdf2_sha256_hash_that_verifies_only_its_password():
    line = user_line("analyst", "s3cret:with-colon", iterations=CHEAP)
    assert LINE.fullmatch(line) and "s3cret" not in line
    name, encoded = line.split(":", 1)
    assert name == "analyst" and encoded.startswith(f"pbkdf2_sha256${CHEAP}$")
    assert verify_password("s3cret:with-colon", encoded)
    assert not verify_password("s3cret:with-colo", encoded) and not verify_password("S3cret:with-colon", encoded)
    # a fresh salt every time: the same password never gives the same line
    assert user_line("analyst", "s3cret:with-colon", iterations=CHEAP) != line
    # the stored iteration count is the one used (a file may mix costs)
    costly = hash_password("pw", iterations=CHEAP + 1)
    assert PasswordHash.decode(costly.encode()) == costly and verify_password("pw", costly.encode())


def test_hash_password_refuses_an_empty_password_and_a_cost_out_of_bounds():
    with pytest.raises(ValueError, match="empty"):
        hash_password("")
    with pytest.raises(ValueError, match="iteration count 99999 is not in"):
        hash_password("pw", iterations=CHEAP - 1)


def test_password_file_holds_users_with_comments_and_blank_lines(tmp_path):
    f = tmp_path / "users"
    f.write_text(f"# analysts\n\n{user_line('alice', 'pa:ss word', CHEAP)}\n  # indented comment\n"
                 f"{user_line('bob', 'x', CHEAP + 7)}\n")
    users = read_password_file(f)
    assert list(users) == ["alice", "bob"] and users["bob"].iterations == CHEAP + 7
    assert verify_password("pa:ss word", users["alice"]) and verify_password("x", users["bob"])


def _hash_with(**changes) -> str:
    h = hash_password("pw", iterations=CHEAP)
    fields = {"scheme": "pbkdf2_sha256", "iterations": str(h.iterations),
              "salt": base64.b64encode(h.salt).decode(), "hash": base64.b64encode(h.digest).decode(), **changes}
    return "$".join(fields.values())


ALICE = r"line 1 \(user 'alice'\): "


@pytest.mark.parametrize("text, message", [
    pytest.param("alice:opensesame\n", ALICE + "a plain-text password .* set it with `kappa serve user add alice "
                 "--file ", id="plain text"),
    pytest.param("bob\n", "line 1 is not `user:pbkdf2_sha256", id="no colon"),
    pytest.param(":pbkdf2_sha256$1\n", "line 1 is not `user:pbkdf2_sha256", id="no user"),
    pytest.param("alice:\n", "line 1 is not `user:pbkdf2_sha256", id="no hash"),
    pytest.param("alice:pbkdf2_sha256$600000$abc\n", ALICE + r"not pbkdf2_sha256\$<iterations>", id="3 fields"),
    pytest.param("alice:" + _hash_with(iterations="6e5") + "\n", ALICE + "the iteration count is not a number",
                 id="iterations not a number"),
    pytest.param("alice:" + _hash_with(iterations="1000") + "\n",
                 ALICE + r"the iteration count is not in \[100000, 10000000\]", id="too cheap"),
    pytest.param("alice:" + _hash_with(salt="not base64!") + "\n", ALICE + "the salt or the hash is not base64",
                 id="not base64"),
    pytest.param("alice:" + _hash_with(salt=base64.b64encode(b"short").decode()) + "\n",
                 ALICE + "the salt has 5 bytes, fewer than 16", id="short salt"),
    pytest.param("alice:" + _hash_with(hash=base64.b64encode(b"x" * 20).decode()) + "\n",
                 ALICE + "the hash has 20 bytes, not 32", id="short hash"),
    pytest.param("alice:" + _hash_with() + "\n#\nalice:" + _hash_with() + "\n",
                 "line 3: user 'alice' is already on line 1", id="twice"),
])
def test_a_line_that_is_not_a_salted_hash_is_refused_naming_file_and_line(tmp_path, text, message):
    f = tmp_path / "users"
    f.write_text(text)
    with pytest.raises(PasswordFileError, match=f"{re.escape(str(f))}: {message}") as refused:
        read_password_file(f)
    assert "opensesame" not in str(refused.value)  # a plain password never reaches a message or log


def test_an_empty_or_missing_password_file_is_refused(tmp_path):
    f = tmp_path / "users"
    f.write_text("# nobody\n")
    with pytest.raises(PasswordFileError, match="no `user:pbkdf2_sha256"):
        read_password_file(f)
    with pytest.raises(PasswordFileError, match="cannot read the password file"):
        read_password_file(tmp_path / "absent")


def test_add_user_creates_the_file_0600_and_replaces_a_users_line_in_place(tmp_path):
    f = tmp_path / "users"
    assert add_user(f, "alice", "first", CHEAP) is False
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    add_user(f, "bob", "second", CHEAP)
    f.write_text("# team\n" + f.read_text())
    assert add_user(f, "alice", "changed", CHEAP) is True
    lines = f.read_text().splitlines()
    assert lines[0] == "# team" and [ln.split(":")[0] for ln in lines[1:]] == ["alice", "bob"]
    users = read_password_file(f)
    assert verify_password("changed", users["alice"]) and not verify_password("first", users["alice"])
    assert verify_password("second", users["bob"])
    assert not re.search(r"first|second|changed", f.read_text())  # no plain text
    f.chmod(0o640)  # an existing file keeps its mode (a group may read it on purpose)
    add_user(f, "carol", "third", CHEAP)
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["users"]  # no temporary file left


@pytest.mark.parametrize("name", ["", "a:b", "a b", "#a", "a\n"])
def test_add_user_refuses_a_name_the_file_cannot_hold(tmp_path, name):
    with pytest.raises(ValueError, match="cannot be a user name"):
        add_user(tmp_path / "users", name, "pw", CHEAP)
    assert not (tmp_path / "users").exists()


def _kappa(*args: str, home: Path, stdin: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_SERVE_")}
    env.update(KAPPA_HOME=str(home), COLUMNS="200")
    return run_kappa(*args, env=env, timeout=120, stdin=stdin)


def test_kappa_serve_user_add_reads_the_password_from_standard_input_never_the_command_line(tmp_path):
    f = tmp_path / "users"
    added = _kappa("serve", "user", "add", "analyst", "--file", str(f), "--iterations", str(CHEAP),
                   home=tmp_path, stdin="pässwörd:1\n")
    assert added.returncode == 0, added.stderr
    assert f"added analyst in {f}" in added.stdout and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert verify_password("pässwörd:1", read_password_file(f)["analyst"])
    # there is no option that takes a password
    argv = _kappa("serve", "user", "add", "analyst", "--file", str(f), "--password", "x", home=tmp_path)
    assert argv.returncode == 2 and "No such option" in argv.stderr
    empty = _kappa("serve", "user", "add", "analyst", "--file", str(f), home=tmp_path, stdin="")
    assert empty.returncode == 1 and "the password is empty; nothing written" in empty.stderr


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("kappa.example.com", False)])
def test_only_a_loopback_host_may_go_without_a_password_file(host, loopback, tmp_path):
    assert is_loopback(host) is loopback
    check_exposure(host, tmp_path / "users")  # with a password file any host is allowed
    if not loopback:
        with pytest.raises(ServeError, match=f"kappa serve --host {re.escape(host)} without a password file"):
            check_exposure(host, None)


def test_kappa_serve_on_all_interfaces_without_a_password_file_exits_1_with_one_line(tmp_path):
    refused = _kappa("serve", "--host", "0.0.0.0", "--port", "1", home=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith(
        "error: kappa serve --host 0.0.0.0 without a password file would let anyone"), refused.stderr
    assert not (tmp_path / "serve").exists()  # refused before anything was started


def test_server_conf_is_custom_authentication_only_with_a_password_file(tmp_path):
    jars = tmp_path / "jars"
    (jars / "spark").mkdir(parents=True)
    (jars / "spark" / "delta-spark_2.13-4.4.0.jar").write_bytes(b"")
    (jars / "spark" / "kappa-delta-logstore.jar").write_bytes(b"")
    with pytest.raises(ServeError, match="kappa-sql-guard.jar is missing: build it with `make install`"):
        server_conf(load_settings(home=tmp_path, jars_dir=jars), "127.0.0.1", 10000)
    (jars / "serve").mkdir()
    (jars / "serve" / "kappa-sql-guard.jar").write_bytes(b"")
    plain = server_conf(load_settings(home=tmp_path, jars_dir=jars), "127.0.0.1", 10000)
    assert plain["spark.hadoop.hive.server2.authentication"] == "NONE"
    # the statement policy, whatever the authentication: the extension, no path reads, dbt's schema
    assert plain["spark.sql.extensions"].split(",") == ["io.delta.sql.DeltaSparkSessionExtension", GUARD_CLASS]
    assert plain["spark.sql.runSQLOnFiles"] == "false"
    assert plain["spark.kappa.sql.guard.schema"] == "analytics"
    assert plain["spark.kappa.sql.guard.location"] == str(tmp_path / "warehouse" / "_dbt")
    assert str(jars / "serve" / "kappa-sql-guard.jar") in plain["spark.driver.extraClassPath"].split(":")
    users = tmp_path / "users"
    add_user(users, "a", "b", CHEAP)
    secured = load_settings(home=tmp_path, jars_dir=jars, serve_password_file=users)
    with pytest.raises(ServeError, match="kappa-serve-auth.jar is missing: build it with `make install`"):
        server_conf(secured, "127.0.0.1", 10000)
    (jars / "serve" / "kappa-serve-auth.jar").write_bytes(b"")
    conf = server_conf(secured, "0.0.0.0", 10000)
    assert conf["spark.hadoop.hive.server2.authentication"] == "CUSTOM"
    assert conf["spark.hadoop.hive.server2.custom.authentication.class"] == AUTH_CLASS
    assert f"-Dhive.server2.custom.authentication.class={AUTH_CLASS}" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.driver.extraClassPath"].endswith(str(jars / "serve" / "kappa-serve-auth.jar"))


def _status(**kw) -> ServeStatus:
    return ServeStatus(up=True, host="127.0.0.1", port=1, jdbc_url="", pid=1, state_dir="", log_file="", **kw)


def test_kappa_clients_log_in_with_the_user_and_password_the_environment_names(tmp_path):
    """The file holds hashes only, so `kappa dbt` cannot take a password from it."""
    users = tmp_path / "users"
    add_user(users, "first", "one", CHEAP)
    add_user(users, "second", "two", CHEAP)
    settings = load_settings(home=tmp_path)
    assert client_credentials(settings, _status()) is None
    st = _status(auth="CUSTOM", password_file=str(users))
    with pytest.raises(ServeError, match=f"checks passwords \\({users}\\): set KAPPA_SERVE_USER and KAPPA_SERVE_PASSWORD"):
        client_credentials(settings, st)
    named = load_settings(home=tmp_path, serve_user="second", serve_password="two")
    assert client_credentials(named, st) == ("second", "two")
    with pytest.raises(ServeError, match="are not a user and password of"):
        client_credentials(load_settings(home=tmp_path, serve_user="second", serve_password="one"), st)
    # a file this process cannot read (the endpoint elsewhere): the endpoint decides
    elsewhere = _status(auth="CUSTOM", password_file=str(tmp_path / "not-here"))
    assert client_credentials(named, elsewhere) == ("second", "two")


# --- the endpoint's Java check (dev.kappa.serve.PasswordFileAuthenticator), in a JVM of its own --------
def java_logins(password_file: Path, commands: list[tuple]) -> list[str]:
    """Run tests/unit/java/CheckLogins.java over ``commands`` (``("login", user, password)`` or
    ``("sleep", ms)``) in one JVM; one output line per login: ``ok <ms>`` or ``refused <ms> <message>``."""
    import pyspark

    jar = load_settings(project_dir=REPO).jars_dir / "serve" / "kappa-serve-auth.jar"
    assert jar.is_file(), f"{jar} is missing: `make install` builds it"
    hive = next((Path(pyspark.__file__).parent / "jars").glob("spark-hive-thriftserver_*.jar"))
    stdin = "".join("\t".join(map(str, c)) + "\n" for c in commands)
    done = subprocess.run(["java", f"-Dkappa.serve.password.file={password_file}", "-cp", f"{jar}:{hive}",
                           str(Path(__file__).parent / "java" / "CheckLogins.java")],
                          input=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_java_verifies_what_python_writes_and_refuses_wrong_or_unknown_logins(tmp_path):
    f = tmp_path / "users"
    logins = {"ascii": "s3cret:with-colon", "unicode": "pässwörd ✓", "costlier": "x"}
    for name, password in logins.items():
        add_user(f, name, password, CHEAP * 2 if name == "costlier" else CHEAP)
    out = java_logins(f, [("login", n, p) for n, p in logins.items()]
                      + [("login", "ascii", "s3cret:with-colo"), ("login", "unicode", "passwort ✓"),
                         ("login", "mallory", "s3cret:with-colon"), ("login", "", "")])
    assert [o.split()[0] for o in out] == ["ok"] * 3 + ["refused"] * 4, out
    assert out[3].endswith("authentication failed for user ascii (1 consecutive failure)")
    assert out[5].endswith("authentication failed for user mallory (1 consecutive failure)")


def test_a_role_in_the_password_file_reads_the_same_in_python_and_java(tmp_path):
    """Issue 40: only a ``dbt`` login may write dbt's schema; the endpoint's guard asks the Java
    provider for the role of the session's user. A line without a role is an analyst's; an unknown
    role makes the whole file refused, on both sides."""
    from kappa.services.serve_users import read_roles

    f = tmp_path / "users"
    add_user(f, "dbt", "pw-dbt", CHEAP, role="dbt")
    add_user(f, "analyst", "pw-an", CHEAP)
    assert f.read_text().splitlines()[0].endswith("=:dbt") and not f.read_text().splitlines()[1].endswith(":analyst")
    assert read_roles(f) == {"dbt": "dbt", "analyst": "analyst"}
    out = java_logins(f, [("login", "dbt", "pw-dbt"), ("role", "dbt"), ("role", "analyst"), ("role", "mallory")])
    assert [o.split()[0] for o in out[:1]] == ["ok"] and out[1:] == ["role dbt", "role analyst", "role null"], out
    with pytest.raises(ValueError, match="role 'admin' is not one of analyst, dbt"):
        add_user(f, "eve", "pw", CHEAP, role="admin")
    f.write_text(f.read_text().replace(":dbt\n", ":admin\n"))
    with pytest.raises(PasswordFileError, match="line 1 \\(user 'dbt'\\): role 'admin' is not one of"):
        read_password_file(f)
    assert java_logins(f, [("role", "dbt"), ("login", "analyst", "pw-an")])[0] == "role null"


def test_java_refuses_every_login_when_a_line_is_plain_text_naming_file_and_line(tmp_path):
    f = tmp_path / "users"
    add_user(f, "ascii", "pw", CHEAP)
    with f.open("a") as out:
        out.write("legacy:opensesame\n")
    out = java_logins(f, [("login", "ascii", "pw"), ("login", "legacy", "opensesame")])
    for line in out:
        assert line.startswith("refused") and line.endswith(
            f"cannot use the password file: {f}: line 2 (user 'legacy'): a plain-text password (or an unknown "
            "scheme): only salted hashes are accepted"), line


def test_java_locks_a_name_out_after_five_failures_for_a_doubling_window(tmp_path):
    """Known and unknown names alike; the right password is refused during the lock-out and
    accepted after it; a success clears the failures."""
    f = tmp_path / "users"
    add_user(f, "bob", "right", CHEAP)
    wrong5 = [("login", "bob", "wrong")] * 5
    out = java_logins(f, wrong5 + [("login", "bob", "right")]
                      + [("login", "ghost", "x")] * 6                          # an unknown name, the same
                      + [("sleep", 2100), ("login", "bob", "wrong"),           # 6th failure: 4 s
                         ("sleep", 2100), ("login", "bob", "right"),           # still locked
                         ("sleep", 2100), ("login", "bob", "right"),           # after 4 s: in, cleared
                         ("login", "bob", "wrong")])
    refusals = [o.split(" ", 2)[2] if o.startswith("refused") else o.split()[0] for o in out]
    assert refusals[:5] == [f"authentication failed for user bob ({n} consecutive failure{'s' * (n > 1)})"
                            for n in range(1, 6)]
    assert refusals[5] == "user bob is locked out for 2 s more after failed logins (password not checked)"
    assert refusals[6:11] == [f"authentication failed for user ghost ({n} consecutive failure{'s' * (n > 1)})"
                              for n in range(1, 6)]
    assert refusals[11].startswith("user ghost is locked out for 2 s more")
    assert refusals[12] == "authentication failed for user bob (6 consecutive failures)"
    assert refusals[13] == "user bob is locked out for 2 s more after failed logins (password not checked)"
    assert refusals[14:] == ["ok", "authentication failed for user bob (1 consecutive failure)"]
    # a refusal during the lock-out checks no password: it is much faster than a check
    ms = [int(o.split()[1]) for o in out]
    assert ms[5] < min(ms[:5]) / 2, ms
