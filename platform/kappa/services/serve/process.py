"""The endpoint's own process (``python -m kappa.services.serve``, :mod:`kappa.services.serve.__main__`):
the Spark Thrift Server with Kappa's guard and authentication (:func:`server_conf`), and the loop
that keeps the catalog in step with the registry (:func:`serve_forever`, :func:`sync_catalog` over
:func:`served_relations`). The client side (start, stop, status, connect) is
:mod:`kappa.services.serve`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from kappa.config import Settings
from kappa.core import storage
from kappa.core.sql_functions import TABLE_PATH
from kappa.delta.registry import Registry, late_events_path, not_promoted_sql, quarantine_path
from kappa.services.serve import (AUTH_CLASS, DBT_SCHEMA, DEFAULT_HOST, DEFAULT_PORT, GUARD_CLASS, INTERNAL_SCHEMA,
                                  KEYSTORE_PASSWORD_KEY, OPERATORS_PATH, POLL_S, RegistryWatch, _paths,
                                  _write_state, auth_jar, check_exposure, guard_jar, jdbc_url, marts_root,
                                  read_object_store_keys, served_names, tls_keystore)
from kappa.services.serve_users import read_password_file

def version_table(asset: str, version: int) -> str:
    """The catalog name a promoted version's Delta table is registered under:
    ``kappa.<asset>_v<N>`` (the view named after the asset selects from it)."""
    return f"{INTERNAL_SCHEMA}.{asset}_v{int(version)}"


def _quoted(name: str) -> str:
    """``schema.name`` as SQL: ``schema.`name```."""
    schema, _, table = name.partition(".")
    return f"{schema}.`{table}`"


def served_relations(settings: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """(views, tables). ``views``: stable name (schema ``default``) -> the SQL it selects, for every
    promoted asset (its version's table at its pinned snapshot, ``kappa.<asset>_v<N> VERSION AS OF
    <snapshot>``, :mod:`kappa.lifecycle.cut`), every asset with versions but none promoted
    (:func:`kappa.delta.registry.not_promoted_sql` with its latest table's columns: any query of it
    fails naming its versions and how to promote one)
    and ``quarantine`` and ``late_events`` (latest). ``tables``: qualified catalog name -> Delta path of
    every table those views read (schema :data:`INTERNAL_SCHEMA`) and every dbt mart under
    :func:`marts_root` (schema :data:`DBT_SCHEMA`). The views read tables by name, never
    ``delta.`<path>```: path reads are off on the endpoint (``spark.sql.runSQLOnFiles=false``)."""
    registry = Registry(settings)
    events = registry.events()
    views, tables = {}, {}
    for asset, v in registry.promoted_all().items():
        name = version_table(asset, v.version)
        tables[name] = str(v.table_path)
        views[asset] = f"SELECT * FROM {_quoted(name)}" + ("" if v.snapshot is None else f" VERSION AS OF {int(v.snapshot)}")
    for asset, message in registry.unpromoted(events).items():
        views[asset] = not_promoted_sql(message, registry.unpromoted_columns(asset, events))
    for name, path in (("quarantine", quarantine_path(settings)), ("late_events", late_events_path(settings))):
        if storage.exists(storage.join(path, "_delta_log"), settings):  # a local folder or an object store
            tables[f"{INTERNAL_SCHEMA}.{name}"] = str(path)
            views[name] = f"SELECT * FROM {_quoted(f'{INTERNAL_SCHEMA}.{name}')}"
    root = marts_root(settings)
    tables.update({f"{DBT_SCHEMA}.{name}": storage.join(root, name) for name in sorted(storage.list_names(root, settings))
                   if storage.exists(storage.join(root, name, "_delta_log"), settings)})
    return views, tables


def server_conf(settings: Settings, host: str, port: int) -> dict[str, str]:
    """Kappa's Spark configuration plus the Thrift server's. Delta's jars are on the driver's class
    path (as for every local session; whatever the master): the Thrift server's handler threads
    resolve the session catalog (``DeltaCatalog``) through the application class loader, which
    jars added with ``spark.jars`` would not reach.

    With ``settings.serve_tls_keystore``: ``hive.server2.use.SSL`` with that keystore (its password
    is not in this dict, see :data:`KEYSTORE_PASSWORD_KEY`). With ``settings.serve_object_store_keys``:
    S3A's ``SimpleAWSCredentialsProvider``, whose keys :func:`serve_forever` sets in the running JVM
    from those files (not in this dict, not in the environment).

    With ``settings.serve_password_file``: ``hive.server2.authentication=CUSTOM`` with
    :data:`AUTH_CLASS` (its jar on the driver's class path). Hive instantiates the provider from a
    fresh ``HiveConf``, which reads JVM system properties but not Spark's ``spark.hadoop.*``, so the
    class is also given as a ``-D`` option of the driver.

    The statement policy: :data:`GUARD_CLASS` joins ``spark.sql.extensions``; path reads and variable
    substitution (``${env:…}``, ``${system:…}``, which Spark would replace before parsing) are off;
    ``spark.kappa.sql.guard.functions`` / ``.operators`` name its allow-lists
    (:data:`kappa.core.sql_functions.TABLE_PATH`, :data:`OPERATORS_PATH`); ``spark.kappa.sql.guard.schema``
    / ``.location`` name where dbt's login may write: :data:`DBT_SCHEMA` and :func:`marts_root`. All
    are SparkConf, which no session can change (a session that changes its SQL settings is refused)."""
    from kappa.core.jvm import spark_jars
    from kappa.streaming.session import spark_conf

    conf = spark_conf(settings)
    class_path = [str(j) for j in spark_jars(settings)] + [str(guard_jar(settings))]
    auth = "NONE"
    if settings.serve_password_file is not None:
        auth = "CUSTOM"
        class_path.append(str(auth_jar(settings)))
        conf["spark.hadoop.hive.server2.custom.authentication.class"] = AUTH_CLASS
        conf["spark.driver.extraJavaOptions"] = (conf.get("spark.driver.extraJavaOptions", "")
                                                 + f" -Dhive.server2.custom.authentication.class={AUTH_CLASS}").strip()
    if settings.serve_object_store_keys is not None:
        # the keys come from files, set in the running JVM by serve_forever: never the environment
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    if settings.serve_tls_keystore is not None:
        # HiveServer2 SSL (binary transport); the keystore's password is set in the driver's
        # Hadoop configuration by serve_forever (KEYSTORE_PASSWORD_KEY), not here.
        conf["spark.hadoop.hive.server2.use.SSL"] = "true"
        conf["spark.hadoop.hive.server2.keystore.path"] = str(Path(settings.serve_tls_keystore).resolve())
    conf.update({
        "spark.app.name": "kappa-serve",
        "spark.driver.extraClassPath": os.pathsep.join(class_path),
        "spark.hadoop.hive.server2.thrift.bind.host": host,
        "spark.hadoop.hive.server2.thrift.port": str(port),
        "spark.hadoop.hive.server2.transport.mode": "binary",
        "spark.hadoop.hive.server2.authentication": auth,
        # The Thrift server's execution metastore (Hive's scratch state) stays under KAPPA_HOME.
        "spark.hadoop.hive.exec.scratchdir": str(_paths(settings)["dir"] / "scratch"),
        "spark.hadoop.hive.exec.local.scratchdir": str(_paths(settings)["dir"] / "scratch-local"),
        "spark.sql.hive.thriftServer.async": "true",
        "spark.sql.extensions": f"{conf['spark.sql.extensions']},{GUARD_CLASS}",
        "spark.sql.runSQLOnFiles": "false",
        "spark.sql.variable.substitute": "false",
        "spark.kappa.sql.guard.functions": str(TABLE_PATH),
        "spark.kappa.sql.guard.operators": str(OPERATORS_PATH),
        "spark.kappa.sql.guard.schema": DBT_SCHEMA,
        "spark.kappa.sql.guard.location": str(marts_root(settings)),
    })
    return conf


def sync_catalog(spark, settings: Settings, applied: dict[str, str], marts: bool = False) -> dict[str, str]:
    """Make ``spark``'s catalog equal :func:`served_relations`, given ``applied`` (what an earlier
    call on this catalog returned, ``{}`` for none): register the tables the views read, swap the
    views, then drop what is no longer served. The one way both analysts' front ends name things:
    the endpoint's catalog (:func:`serve_forever`) and ``kappa sql``'s session
    (:func:`kappa.analytics.sql.run_sql`). With ``marts`` (the endpoint at start-up, so it never races
    a running ``dbt build`` creating the same table; every ``kappa sql``, where dbt never writes) also
    register the dbt marts in :data:`DBT_SCHEMA` and drop the ones no longer there.
    Returns name -> what it serves (a view's SQL, a table's path). ``CREATE OR REPLACE VIEW`` swaps a
    view in one catalog call, so a query sees the old snapshot or the new one, never no table; an
    external table's drop leaves its files alone; a name ``applied`` at another path (a session
    reused over another warehouse) is dropped and registered again."""
    views, tables = served_relations(settings)
    if marts:  # start-up: the schemas exist from then on
        for schema in (INTERNAL_SCHEMA, DBT_SCHEMA):
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
    for name, path in tables.items():
        # dbt owns its schema once the endpoint runs; the marts are registered at start-up only
        if applied.get(name) != path and (marts or not name.startswith(f"{DBT_SCHEMA}.")):
            if name in applied:
                spark.sql(f"DROP TABLE IF EXISTS {_quoted(name)}")
            spark.sql(f"CREATE TABLE IF NOT EXISTS {_quoted(name)} USING delta LOCATION '{path}'")
    for name, select in views.items():
        if applied.get(name) != select:
            spark.sql(f"CREATE OR REPLACE VIEW default.`{name}` AS {select}")
    for name in set(applied) - set(views) - set(tables):
        if name.startswith(f"{INTERNAL_SCHEMA}.") or (marts and name.startswith(f"{DBT_SCHEMA}.")):
            spark.sql(f"DROP TABLE IF EXISTS {_quoted(name)}")
        elif "." not in name:
            spark.sql(f"DROP VIEW IF EXISTS default.`{name}`")
    return {**tables, **views}


def serve_forever(settings: Settings, host: str, port: int) -> None:
    """The endpoint's process, in the foreground (``python -m kappa.services.serve``; what the Kubernetes
    Deployment runs): a Spark driver running HiveThriftServer2 until SIGTERM. Raises
    :class:`ServeError` for a non-loopback ``host`` without a password file, or object-store keys
    (``KAPPA_SERVE_OBJECT_STORE_KEYS``) that cannot be read,
    :class:`~kappa.services.serve_users.PasswordFileError` when the password file is malformed."""
    from pyspark.sql import SparkSession

    from kappa.core.jvm import java_executable

    java_executable()
    check_exposure(host, settings.serve_password_file)
    if settings.serve_password_file is not None:
        read_password_file(settings.serve_password_file)  # fail now, naming the file, not at the first login
    keystore = tls_keystore(settings)
    keys = read_object_store_keys(settings)
    _paths(settings)["dir"].mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in server_conf(settings, host, port).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if keystore is not None:  # read by the Thrift server's HiveConf, built from this configuration
        spark.sparkContext._jsc.hadoopConfiguration().set(KEYSTORE_PASSWORD_KEY, keystore[1])
    if keys is not None:
        # The object-store keys, read from their files: into the running JVM's Hadoop configuration
        # (S3A's SimpleAWSCredentialsProvider, see server_conf), which no SQL statement reads (SET
        # shows the SQL configuration only), and, now that the JVM runs without them in its
        # environment, into this Python process's for its own registry reads (delta-rs, pyarrow).
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        hadoop.set("fs.s3a.access.key", keys["AWS_ACCESS_KEY_ID"])
        hadoop.set("fs.s3a.secret.key", keys["AWS_SECRET_ACCESS_KEY"])
        os.environ.update(keys)
    # This session keeps the catalog in step; every client session is a new one, under the policy.
    spark.sparkContext._jvm.dev.kappa.serve.ReadOnlySqlGuard.trust(spark._jsparkSession)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))

    watch = RegistryWatch(settings)
    version = watch.version()
    applied = sync_catalog(spark, settings, {}, marts=True)
    jvm = spark.sparkContext._jvm
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())
    password_file = settings.serve_password_file
    state = {"pid": os.getpid(), "host": host, "port": port, "ready": True, "registry_version": version,
             "tables": applied, "auth": "CUSTOM" if password_file else "NONE",
             "password_file": str(password_file) if password_file else None, "tls": keystore is not None}
    _write_state(settings, state)
    print(f"kappa serve: {jdbc_url(host, port, state['tls'])} ({state['auth']} authentication) serving "
          f"{', '.join(served_names(applied)) or 'nothing yet'}", flush=True)
    try:
        while not stopping:
            time.sleep(POLL_S)
            current = watch.version()
            if current != state["registry_version"]:
                applied = sync_catalog(spark, settings, applied)
                state.update(registry_version=current, tables=applied)
                _write_state(settings, state)
                print(f"kappa serve: registry v{current}: {json.dumps(applied)}", flush=True)
    finally:
        server.stop()
        spark.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m kappa.services.serve --host H --port P``: the endpoint's own process (started by
    :func:`start`); serves until terminated."""
    import argparse

    from kappa.config import load_settings

    parser = argparse.ArgumentParser(prog="python -m kappa.services.serve")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    serve_forever(load_settings(), args.host, args.port)
