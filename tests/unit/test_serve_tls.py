"""`kappa serve`'s TLS settings: the keystore and its password file are checked before anything
starts, naming the variable; the password never enters the Spark configuration (spark-submit's
arguments, visible in the process table). The endpoint speaking TLS to real clients is
tests/analytics/test_serve_tls.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.services.serve import KEYSTORE_PASSWORD_KEY, ServeError, jdbc_url, tls_keystore
from kappa.services.serve.process import server_conf

REPO = Path(__file__).resolve().parents[2]


def _settings(tmp_path, **fields):
    return load_settings(project_dir=REPO, home=str(tmp_path / "home"), **fields)


def test_no_keystore_is_plain_tcp(tmp_path):
    settings = _settings(tmp_path)
    assert tls_keystore(settings) is None
    assert "spark.hadoop.hive.server2.use.SSL" not in server_conf(settings, "127.0.0.1", 10000)
    assert jdbc_url("h", 1) == "jdbc:hive2://h:1/default" and jdbc_url("h", 1, True).endswith("/default;ssl=true")


def test_the_keystore_password_comes_from_its_file_and_stays_out_of_the_spark_conf(tmp_path):
    keystore, secret = tmp_path / "serve.p12", tmp_path / "pw"
    keystore.write_bytes(b"\x30\x82")
    secret.write_text("s3cret-keystore\n")
    settings = _settings(tmp_path, serve_tls_keystore=keystore, serve_tls_password_file=secret)
    assert tls_keystore(settings) == (keystore.resolve(), "s3cret-keystore")
    conf = server_conf(settings, "127.0.0.1", 10000)
    assert conf["spark.hadoop.hive.server2.use.SSL"] == "true"
    assert conf["spark.hadoop.hive.server2.keystore.path"] == str(keystore.resolve())
    assert not any("s3cret" in v for v in conf.values()) and not any(KEYSTORE_PASSWORD_KEY in k for k in conf)


@pytest.mark.parametrize("case, message", [
    ("no keystore file", r"KAPPA_SERVE_TLS_KEYSTORE: .*missing\.p12 is not a file"),
    ("no password file set", r"KAPPA_SERVE_TLS_PASSWORD_FILE is not set"),
    ("password file missing", r"KAPPA_SERVE_TLS_PASSWORD_FILE: cannot read .*absent"),
    ("password file empty", r"KAPPA_SERVE_TLS_PASSWORD_FILE: .*empty is empty"),
])
def test_a_bad_keystore_setting_fails_naming_the_variable(tmp_path, case, message):
    keystore = tmp_path / "serve.p12"
    keystore.write_bytes(b"\x30\x82")
    (tmp_path / "empty").write_text("\n")
    fields = {
        "no keystore file": dict(serve_tls_keystore=tmp_path / "missing.p12", serve_tls_password_file=tmp_path / "empty"),
        "no password file set": dict(serve_tls_keystore=keystore),
        "password file missing": dict(serve_tls_keystore=keystore, serve_tls_password_file=tmp_path / "absent"),
        "password file empty": dict(serve_tls_keystore=keystore, serve_tls_password_file=tmp_path / "empty"),
    }[case]
    with pytest.raises(ServeError, match=message):
        tls_keystore(_settings(tmp_path, **fields))
