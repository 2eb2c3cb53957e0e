"""The environment `kappa serve` starts the endpoint with: an allow-list of the caller's variables
and Kappa's settings, never a secret; its object-store keys go to files (issue 40 item 2)."""

from __future__ import annotations

import stat

from kappa.config import load_settings
from kappa.services.serve import endpoint_env, object_store_keys, read_object_store_keys, write_object_store_keys

CALLER = {"AWS_ACCESS_KEY_ID": "WRITER", "AWS_SECRET_ACCESS_KEY": "writer-secret", "PATH": "/usr/bin",
          "KAPPA_SERVE_PASSWORD_FILE": "/stale", "KAPPA_SERVE_PASSWORD": "dbt-password",
          "DAGSTER_PG_PASSWORD": "pg", "AWS_REGION": "eu-west-1"}


def test_the_endpoint_gets_no_inherited_secret_and_its_own_keys_as_files(tmp_path):
    settings = load_settings(home=tmp_path, serve_aws_access_key_id="READER",
                             serve_aws_secret_access_key="reader-secret")
    keys = object_store_keys(settings, CALLER)
    assert keys == {"AWS_ACCESS_KEY_ID": "READER", "AWS_SECRET_ACCESS_KEY": "reader-secret"}
    folder = write_object_store_keys(tmp_path / "keys", keys)
    env = endpoint_env(settings, CALLER, tmp_path / "users", folder)
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "KAPPA_SERVE_PASSWORD", "DAGSTER_PG_PASSWORD"} & set(env)
    assert not {"READER", "reader-secret", "writer-secret", "dbt-password", "pg"} & set(env.values())
    assert env["KAPPA_SERVE_PASSWORD_FILE"] == str(tmp_path / "users") and env["PATH"] == "/usr/bin"
    assert env["AWS_REGION"] == "eu-west-1" and env["KAPPA_HOME"] == str(tmp_path)
    assert env["KAPPA_SERVE_OBJECT_STORE_KEYS"] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()} == {0o600}
    assert read_object_store_keys(load_settings(home=tmp_path, serve_object_store_keys=folder)) == keys
    assert CALLER["AWS_ACCESS_KEY_ID"] == "WRITER"  # the caller's mapping is not changed


def test_without_its_own_keys_the_endpoint_gets_the_callers_as_files_and_no_stale_password_file(tmp_path):
    settings = load_settings(home=tmp_path)
    assert object_store_keys(settings, CALLER) == {"AWS_ACCESS_KEY_ID": "WRITER", "AWS_SECRET_ACCESS_KEY": "writer-secret"}
    env = endpoint_env(settings, CALLER, None)
    assert "KAPPA_SERVE_PASSWORD_FILE" not in env and "AWS_ACCESS_KEY_ID" not in env
    assert object_store_keys(settings, {"PATH": "/bin"}) is None


def test_the_endpoint_runs_with_the_tiered_jit_whatever_its_caller_uses(tmp_path):
    """A long-running endpoint never gets the C1-only JIT of short-lived drivers (the caller's
    setting, or its environment's ``KAPPA_SPARK_DRIVER_JIT``)."""
    settings = load_settings(home=tmp_path, spark_driver_jit="c1")
    env = endpoint_env(settings, {**CALLER, "KAPPA_SPARK_DRIVER_JIT": "c1"}, None)
    assert "KAPPA_SPARK_DRIVER_JIT" not in env
