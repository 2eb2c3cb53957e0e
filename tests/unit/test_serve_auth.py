"""The SQL endpoint's password file and authentication settings (pure functions; the login itself
is tested against the real Thrift server in tests/analytics/test_serve.py)."""

from __future__ import annotations

import pytest

from kappa.config import load_settings
from kappa.services.serve import AUTH_CLASS, ServeError, ServeStatus, client_credentials, read_password_file, server_conf


def test_password_file_lines_are_user_colon_password_with_comments_and_blank_lines(tmp_path):
    f = tmp_path / "users"
    f.write_text("# analysts\n\nalice:pa:ss word\n  # indented comment\nbob:x\n")
    assert read_password_file(f) == {"alice": "pa:ss word", "bob": "x"}


@pytest.mark.parametrize("text, line", [("alice:ok\nbob\n", 2), (":nouser\n", 1), ("alice:\n", 1)])
def test_a_malformed_line_is_refused_naming_file_and_line(tmp_path, text, line):
    f = tmp_path / "users"
    f.write_text(text)
    with pytest.raises(ServeError, match=f"{f}: line {line} is not `user:password`"):
        read_password_file(f)


def test_an_empty_or_missing_password_file_is_refused(tmp_path):
    f = tmp_path / "users"
    f.write_text("# nobody\n")
    with pytest.raises(ServeError, match="no `user:password` line"):
        read_password_file(f)
    with pytest.raises(ServeError, match="cannot read the password file"):
        read_password_file(tmp_path / "absent")


def test_server_conf_is_custom_authentication_only_with_a_password_file(tmp_path):
    jars = tmp_path / "jars"
    (jars / "spark").mkdir(parents=True)
    (jars / "spark" / "delta-spark_2.13-4.4.0.jar").write_bytes(b"")
    plain = server_conf(load_settings(home=tmp_path, jars_dir=jars), "127.0.0.1", 10000)
    assert plain["spark.hadoop.hive.server2.authentication"] == "NONE"
    users = tmp_path / "users"
    users.write_text("a:b\n")
    secured = load_settings(home=tmp_path, jars_dir=jars, serve_password_file=users)
    with pytest.raises(ServeError, match="kappa-serve-auth.jar is missing: build it with `make install`"):
        server_conf(secured, "127.0.0.1", 10000)
    (jars / "serve").mkdir()
    (jars / "serve" / "kappa-serve-auth.jar").write_bytes(b"")
    conf = server_conf(secured, "0.0.0.0", 10000)
    assert conf["spark.hadoop.hive.server2.authentication"] == "CUSTOM"
    assert conf["spark.hadoop.hive.server2.custom.authentication.class"] == AUTH_CLASS
    assert f"-Dhive.server2.custom.authentication.class={AUTH_CLASS}" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.driver.extraClassPath"].endswith(str(jars / "serve" / "kappa-serve-auth.jar"))


def _status(**kw) -> ServeStatus:
    return ServeStatus(up=True, host="127.0.0.1", port=1, jdbc_url="", pid=1, state_dir="", log_file="", **kw)


def test_kappa_clients_log_in_as_the_first_user_unless_the_environment_names_one(tmp_path):
    users = tmp_path / "users"
    users.write_text("first:one\nsecond:two\n")
    settings = load_settings(home=tmp_path)
    assert client_credentials(settings, _status()) is None
    st = _status(auth="CUSTOM", password_file=str(users))
    assert client_credentials(settings, st) == ("first", "one")
    named = load_settings(home=tmp_path, serve_user="second", serve_password="two")
    assert client_credentials(named, st) == ("second", "two")
