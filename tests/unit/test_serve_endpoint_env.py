"""The environment `kappa serve` starts the endpoint with: its own object-store keys when given
(issue 23 item 1), else the caller's."""

from __future__ import annotations

from kappa.config import load_settings
from kappa.services.serve import endpoint_env

CALLER = {"AWS_ACCESS_KEY_ID": "WRITER", "AWS_SECRET_ACCESS_KEY": "writer-secret", "PATH": "/usr/bin",
          "KAPPA_SERVE_PASSWORD_FILE": "/stale"}


def test_the_endpoint_runs_with_its_own_keys_when_they_are_set(tmp_path):
    settings = load_settings(home=tmp_path, serve_aws_access_key_id="READER",
                             serve_aws_secret_access_key="reader-secret")
    env = endpoint_env(settings, CALLER, tmp_path / "users")
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("READER", "reader-secret")
    assert env["KAPPA_SERVE_PASSWORD_FILE"] == str(tmp_path / "users") and env["PATH"] == "/usr/bin"
    assert CALLER["AWS_ACCESS_KEY_ID"] == "WRITER"  # the caller's mapping is not changed


def test_without_them_the_endpoint_inherits_the_callers_keys_and_no_stale_password_file(tmp_path):
    env = endpoint_env(load_settings(home=tmp_path), CALLER, None)
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("WRITER", "writer-secret")
    assert "KAPPA_SERVE_PASSWORD_FILE" not in env and env["KAPPA_HOME"] == str(tmp_path)
