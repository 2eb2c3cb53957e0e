"""The ``kappa`` command: one front end over the library (Dagster is the other).

Every command has ``--help``. Errors Kappa expects (a broker already running, a bad asset file, a
failed query…) print one clear message and exit with status 1; no traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from typing import Optional

import typer
from rich.table import Table

from kappa.cli.bench import bench_app
from kappa.cli.cdc import cdc_app
from kappa.cli.chaos import chaos_app
from kappa.cli.command import guarded
from kappa.cli.declarations import declarations_app
from kappa.cli.demo import demo
from kappa.cli.forget import forget
from kappa.cli.ingest import ingest_app
from kappa.cli.output import (OutputFormat, StatusFormat, console, format_option, gate_table, print_frame,
                              progress_printer, results_table)
from kappa.cli.serve import serve_app
from kappa.cli.services import service_app
from kappa.config import Settings, load_settings
from kappa.core import logs
from kappa.core.guard import Guard, fail
from kappa.services import services

app = typer.Typer(help="Kappa: replay-first streaming data platform (Kafka -> Structured Streaming -> Delta).",
                  no_args_is_help=True, add_completion=False, rich_markup_mode="markdown")
# kappa objectstore|kafka|postgres|connect|cluster start|stop|status (serve's start takes options: below)
for _service in services():
    if _service.name != "serve":
        app.add_typer(service_app(_service, console), name=_service.name)
app.add_typer(ingest_app, name="ingest")
app.add_typer(cdc_app, name="cdc")
app.add_typer(declarations_app, name="declarations")  # kappa declarations add|edit|retire|list
app.add_typer(chaos_app, name="chaos")  # kappa chaos driver|broker: fault injection
app.add_typer(serve_app, name="serve")  # kappa serve [start]|status|stop|user add: the SQL endpoint
app.add_typer(bench_app, name="bench")  # kappa bench [nexmark]: throughput and latency
app.command("demo")(demo)  # kappa demo: the main job


@app.callback()
def main(verbose: bool = typer.Option(
        False, "--verbose",
        help="Show the logs of Spark (JVM, Python workers), py4j and librdkafka on the console instead of "
             "writing them to `<KAPPA_HOME>/logs/kappa-<pid>.log`.")) -> None:
    """Kappa: replay-first streaming data platform (Kafka -> Structured Streaming -> Delta)."""
    if verbose:
        # Through the environment: every load_settings() of this process and of the kappa
        # processes it starts (`kappa serve`, chaos drivers) then sees it (KAPPA_VERBOSE).
        os.environ["KAPPA_VERBOSE"] = "true"
    with Guard():
        logs.route(load_settings())


# --- run ------------------------------------------------------------------------------------------
@app.command("run")
def run(
    assets: Optional[list[str]] = typer.Argument(None, help="Assets to run (default: all)."),
    until_caught_up: bool = typer.Option(False, "--until-caught-up", help="Process everything in the log, then return (available-now trigger)."),
    continuous: bool = typer.Option(False, "--continuous", help="Keep the queries running until Ctrl-C / SIGTERM."),
    keep_names: bool = typer.Option(False, "--keep-names", help="Leave the stable names at their pinned "
                                    "snapshots (default: advance the cut over what the run committed)."),
    advance_every: float = typer.Option(60.0, "--advance-every", min=1.0, help="With --continuous: seconds "
                                        "between two advances of the cut."),
) -> None:
    """Run streaming assets' current versions (v1 is created on first run). A bounded run
    (``--until-caught-up``) ends by advancing the cut over the lineages of the assets it ran, as
    ``kappa advance`` does, so the stable names show what it committed; a continuous run advances
    it every ``--advance-every`` seconds (``--keep-names``: the names stay)."""
    from kappa.runners import run_until_caught_up
    from kappa.runners.local import run_continuous

    if until_caught_up == continuous:
        fail("choose exactly one of --until-caught-up or --continuous")
    with Guard():
        settings = load_settings()
        if until_caught_up:
            started = time.monotonic()
            results = run_until_caught_up(settings, assets or None, on_progress=progress_printer())
            console.print(results_table(results))
            console.print(f"caught up in {time.monotonic() - started:.1f} s")
            if not keep_names:
                move_names(settings, sorted({r.asset for r in results}))
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
        mover = None if keep_names else NameMover(settings, assets or None, advance_every)
        names = run_continuous(settings, assets or None, stop=stop, spark=spark, on_progress=progress_printer(),
                               on_poll=mover)
        console.print(f"stopped: {', '.join(names)}")


# --- sql ------------------------------------------------------------------------------------------
@app.command("sql")
def sql(
    query: str = typer.Argument(..., help="A Spark SQL query; promoted assets are views by name."),
    fmt: OutputFormat = format_option("table, csv or json", OutputFormat.table),
) -> None:
    """Query promoted tables by their stable names with Spark SQL."""
    from kappa.analytics.sql import run_sql
    from kappa.streaming.session import spark_session

    with Guard():
        settings = load_settings()
        print_frame(run_sql(spark_session(settings), settings, query), fmt)


@app.command("dbt", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@guarded
def dbt_cmd(
    settings: Settings,
    ctx: typer.Context,
    port: Optional[int] = typer.Option(None, "--serve-port", help="Port for `kappa serve` if it must be started (default KAPPA_SERVE_PORT or 10000)."),
) -> None:
    """Run dbt on the project in dbt/ against `kappa serve` (started if needed): `kappa dbt build`,
    `kappa dbt test -s carrier_daily_performance`, any dbt arguments."""
    from kappa.analytics.dbt import run_dbt

    if not ctx.args:
        fail("give a dbt command, e.g. `kappa dbt build`")
    raise typer.Exit(run_dbt(settings, list(ctx.args), port=port).returncode)


# --- assets, versions, promotion ------------------------------------------------------------------
@app.command("assets")
@guarded
def assets_cmd(settings: Settings, fmt: StatusFormat = format_option()) -> None:
    """Validate every declaration (the files of assets/ and those recorded in the warehouse) and
    list the streaming assets."""
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.quality.gate import expectations

    catalog = catalog_of(settings)
    for spec in catalog:
        expectations(spec)  # each a Great Expectations expectation with its arguments
    rows = [
        {"name": s.name, "layer": s.layer, "group": s.group, "source": s.topics or s.upstream,
         "transform": s.transform.kind, "file": s.where}
        for s in (catalog[n] for n in catalog.topological())
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
@guarded
def versions(
    settings: Settings,
    asset: str = typer.Argument(..., help="Asset name."),
    fmt: StatusFormat = format_option("text (a table) or json"),
) -> None:
    """Every version of an asset: created and promoted times, state, rows, source offsets; for the
    promoted version its pin (json: ``snapshot``, ``cut``, ``verified`` and ``why_unverified``: what
    was not evaluated when the pin is not verified)."""
    from kappa.delta.registry import Registry
    from kappa.delta.declarations import catalog as catalog_of

    catalog_of(settings)[asset]
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
            # the promoted version's pin: the Delta version its stable name reads, and the cut
            "snapshot": v.snapshot if v.state == "promoted" else None,
            "cut": (v.pin or {}).get("cut") if v.state == "promoted" else None,
            **pin_verification(asset, v.pin if v.state == "promoted" else None),
        })
    if fmt == StatusFormat.json:
        print(json.dumps(rows, default=str))
        return
    table = Table(title=f"{asset} versions")
    for col in ("version", "state", "created", "promoted", "snapshot", "rows", "quarantined", "upstream"):
        table.add_column(col)
    for r in rows:
        table.add_row(f"v{r['version']}", r["state"], r["created_at"][:19], (r["promoted_at"] or "")[:19],
                      "" if r["snapshot"] is None else str(r["snapshot"]),
                      "" if r["rows"] is None else f"{r['rows']:,}",
                      "" if r["quarantined"] is None else f"{r['quarantined']:,}",
                      ", ".join(f"{k}/v{n}" for k, n in r["upstream"].items()))
    console.print(table)


@app.command("status")
@guarded
def status(
    settings: Settings,
    assets: Optional[list[str]] = typer.Argument(None, help="Assets to show (default: every asset with a version)."),
    stall_after: float = typer.Option(300.0, "--stall-after", help="Seconds without a commit after which a "
                                      "running query with records to read counts as stalled."),
    fmt: StatusFormat = format_option("text (a table) or json"),
) -> None:
    """Lag and health of each asset's latest version, read from its checkpoint (the newest committed
    micro-batch's offsets) against the log end offsets; the same reading as Dagster's sensor. For
    assets that keep late rows, ``late``: rows named in the late-events table, Spark's drops over
    the recorded runs, and those not named; ``stable_name``: the promoted version's pinned snapshot
    and cut, ``verified``, ``why_unverified`` and ``held_back`` (why the newest consistent cut, as
    ``kappa advance`` would choose it now, stays before the table's latest micro-batch, naming the
    reader that holds it; one line, also printed under the table); ``freshness`` for an asset that
    declares it (:mod:`kappa.quality.freshness`: records and seconds behind, fresh or STALE and
    why); ``schema_drift`` for a parse asset: undeclared field -> records that carried it
    (commit metadata, :func:`kappa.lifecycle.evolve.drift_counts`), also printed under the table;
    ``archive`` for an asset that archives a topic (``topics.yaml``: ``archive``): per partition the
    log start and end offsets, the offset the archive holds every record below, and its health
    (:func:`kappa.quality.archive.archive_health`), also printed under the table."""
    from kappa.delta.registry import Registry
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.lifecycle.cut import held_back_now
    from kappa.streaming.checkpoint import observe
    from kappa.streaming.kinds import kind_of
    from kappa.streaming.late import late_counts
    from kappa.quality.freshness import evaluate
    from kappa.lifecycle.evolve import drift_counts
    from kappa.quality.archive import archive_health

    catalog = catalog_of(settings)
    for name in assets or []:
        catalog[name]  # an unknown name fails with the list of declared assets
    registry = Registry(settings)  # the command's one snapshot
    found = observe(settings, catalog, stall_after, names=assets or None, registry=registry)
    promoted = registry.promoted_all()
    held = held_back_now(settings, registry) if promoted else {}
    archived: dict[str, list[dict]] = {}
    if any(t.archive for t in catalog.topics.values()):
        for a in archive_health(settings, catalog, registry):
            archived.setdefault(a.archive.partition("/")[0] if a.archive else "", []).append(dataclasses.asdict(a))

    def stable_name(asset: str) -> dict | None:
        v = promoted.get(asset)  # what the stable name reads: its promoted version's pin
        return None if v is None else {"version": v.version, "snapshot": v.snapshot,
                                       "cut": (v.pin or {}).get("cut"), **pin_verification(asset, v.pin),
                                       "held_back": held.get(asset)}

    def freshness(asset: str) -> dict | None:
        f = evaluate(settings, asset, registry, catalog)
        return None if f is None else dataclasses.asdict(f)

    rows = [{"asset": h.asset, "version": h.version, "state": h.state, "healthy": h.healthy,
             "committed_batch": h.committed_batch, "lag": h.lag, "total_lag": h.total_lag,
             "upstream_versions_behind": h.upstream_versions_behind,
             "seconds_since_progress": h.seconds_since_progress, "reason": h.reason,
             "stable_name": stable_name(h.asset),
             # Late rows: named in the late-events table, and Spark's drops not named (if any).
             "late": late_counts(settings, registry.version(h.asset, h.version),
                                 names_itself=kind_of(catalog[h.asset]).dropped_rows is None)
             if kind_of(catalog[h.asset]).keeps_late_rows else None,
             # Declared freshness against the log now (None: not declared).
             "freshness": freshness(h.asset),
             # Schema drift: the undeclared fields this version's records carried (parse assets).
             "schema_drift": (drift_counts(settings, registry.version(h.asset, h.version))
                              if "schema_drift" in kind_of(catalog[h.asset]).gate_checks else None),
             # The log's archive: per partition what it holds against the log (archive assets).
             "archive": archived.get(h.asset)}
            for h in found]
    if fmt == StatusFormat.json:
        print(json.dumps(rows, default=str))
        return
    table = Table(title="streaming queries")
    declared = any(r["freshness"] for r in rows)
    for col in ("asset", "version", "state", "batch", "lag (records)", "behind (Delta versions)", "late (named)",
                "health", *(["freshness"] if declared else [])):
        table.add_column(col, overflow="fold")
    for r in rows:
        late, fresh = r["late"], r["freshness"]
        shown = [] if not declared else ["" if fresh is None else "[green]fresh[/]" if fresh["fresh"] else
                                         f"[yellow]not evaluated: {fresh['reason']}[/]" if fresh["fresh"] is None
                                         else f"[red]STALE: {fresh['reason']}[/]"]
        table.add_row(r["asset"], f"v{r['version']}", r["state"],
                      "" if r["committed_batch"] is None else str(r["committed_batch"]),
                      f"{r['total_lag']:,}" if not r["upstream_versions_behind"] else "",
                      "" if r["upstream_versions_behind"] is None else str(r["upstream_versions_behind"]),
                      "" if late is None else f"{late['named']:,}" + (
                          f" [red](+{late['not_named']:,} dropped, not named)[/]" if late["not_named"] else ""),
                      "[green]ok[/]" if r["healthy"] else f"[red]{r['reason']}[/]", *shown)
    console.print(table if rows else "no asset has a version yet: `kappa run` starts them")
    for r in rows:
        if r["schema_drift"]:
            fields = ", ".join(f"{n} ({c:,} records)" for n, c in r["schema_drift"].items())
            console.print(f"{r['asset']}/v{r['version']}: schema drift: undeclared fields {fields}; "
                          f"`kappa declarations evolve {r['asset']}` proposes them", highlight=False)
    for r in rows:
        for a in r["archive"] or []:
            console.print(f"{a['archive']} archives {a['topic']}[{a['partition']}]: log {a['log_start']:,}-{a['log_end']:,}, "
                          f"archived below {a['archived_to']:,} ({a['unarchived']:,} not yet): "
                          + ("[green]ok[/]" if a["healthy"] else f"[red]{a['reason']}[/]"), highlight=False)
    print_held_back({a: line for a, line in held.items() if not assets or a in assets})


@app.command("gate")
@guarded
def gate(settings: Settings, asset: str, version: int = typer.Argument(..., help="Version number (2 for v2).")) -> None:
    """Run the gate (GX suite, quarantine rate, shadow diff) on one version and record the result."""
    from kappa.quality.gate import run_gate

    report = run_gate(settings, asset, version)
    console.print(gate_table(report))
    if report.data_docs_path:
        console.print(f"Data Docs: {report.data_docs_path}")
    if not report.passed:
        raise typer.Exit(1)


@app.command("replay")
@guarded
def replay(
    settings: Settings,
    asset: str,
    promote: bool = typer.Option(False, "--promote", help="Promote the new chain if every blocking check passes."),
) -> None:
    """Replay ASSET (and everything downstream of it) from the start of the log into new versions,
    run the gate on each, and with --promote promote the chain atomically."""
    from kappa.lifecycle import promotion

    report = promotion.replay(settings, asset, promote=promote, on_progress=progress_printer(),
                              on_step=lambda m: console.print(m, highlight=False))
    console.print(results_table(report.results))
    for g in report.gates.values():
        console.print(gate_table(g))
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


app.command("forget")(forget)  # kappa forget: delete a record key everywhere


@app.command("maintain")
@guarded
def maintain(
    settings: Settings,
    assets: Optional[list[str]] = typer.Argument(None, help="Assets whose versions to maintain (default: all); the shared tables always."),
    retention: Optional[float] = typer.Option(None, "--vacuum-retention", metavar="HOURS", help="VACUUM's retention in "
                                              "hours (default: each table's, Delta's 7 days); at least the platform "
                                              "floor, KAPPA_MIN_RETENTION_HOURS (168)."),
    fmt: StatusFormat = format_option("text (a table) or json"),
) -> None:
    """Compact (OPTIMIZE), checkpoint and VACUUM every version of ASSETS and the shared tables,
    outside the queries (they may keep running). Exits 1 if a table failed."""
    from kappa.lifecycle.maintain import maintain as run_maintenance

    text = fmt is StatusFormat.text
    report = run_maintenance(settings, assets or None, retention_hours=retention,
                             say=(lambda m: console.print(m, highlight=False)) if text else None)
    if not text:
        print(json.dumps(report.to_json()))
    else:
        table = Table(title=f"maintenance ({report.seconds:.1f} s)")
        for col in ("table", "files", "MiB", "rows", "Delta version", "vacuumed", "s", "result"):
            table.add_column(col)
        for t in report.tables:
            table.add_row(t.table, f"{t.files_before} -> {t.files_after}",
                          f"{t.bytes_before / 2**20:.1f} -> {t.bytes_after / 2**20:.1f}", f"{t.rows_after:,}",
                          f"{t.version_before} -> {t.version_after}", str(t.vacuumed), f"{t.seconds:.1f}",
                          t.skipped or (f"[red]{t.error}[/]" if t.error else "[green]ok[/]"))
        console.print(table)
    if report.failed:
        fail(f"{len(report.failed)} tables failed: " + ", ".join(t.table for t in report.failed))


@app.command("requests")
@guarded
def requests_command(
    settings: Settings,
    fmt: StatusFormat = format_option("text (a table) or json"),
) -> None:
    """List the requests that wait for approval or ran (forget and maintain from the Dagster UI):
    what each does, who asked (as claimed), who approved (as verified), its state and outcome."""
    from kappa.lifecycle.approval import requests

    reqs = requests(settings)
    if fmt == StatusFormat.json:
        print(json.dumps([{**r.__dict__, "state": r.state} for r in reqs], default=str, indent=2))
        return
    table = Table(title="requests (kappa approve REQUEST runs one)")
    for col in ("request", "requested at", "what", "claimed by (unverified)", "origin", "state", "approved by",
                "outcome"):
        table.add_column(col)
    for r in reqs:
        approver = r.approvals[-1]["approver"] if r.approvals else None
        table.add_row(r.request_id, f"{r.requested_at:%Y-%m-%d %H:%M:%S}", r.describe(), r.claimed_by, r.origin,
                      r.state, f"{approver['user']} ({approver['source']})" if approver else "",
                      r.error or (json.dumps(r.outcome) if r.outcome else ""))
    console.print(table)


@app.command("approve")
@guarded
def approve_command(
    settings: Settings,
    request_id: str = typer.Argument(..., metavar="REQUEST", help="The request's id (`kappa requests`)."),
    key: Optional[str] = typer.Option(None, "--key", help="A forget's key, needed only on a changelog topic "
                                      "(checked against the request's SHA-256)."),
) -> None:
    """Approve REQUEST as yourself (your local user, or your Kubernetes identity on the kubernetes
    runner) and run it now; the registry records the approval and the outcome."""
    from kappa.lifecycle.approval import approve

    req = approve(settings, request_id, key=key, say=lambda m: console.print(f"  {m}", highlight=False))
    console.print(f"request {req.request_id} done: {json.dumps(req.outcome)}", highlight=False)


@app.command("promote")
@guarded
def promote(
    settings: Settings,
    asset: str, version: int = typer.Argument(..., help="Version number (2 for v2)."),
    only: bool = typer.Option(False, "--only", help="Promote this version alone even if a downstream "
                              "(or upstream) stable name stays pinned over a different version of it."),
) -> None:
    """Point the stable name of ASSET at VERSION (one atomic registry commit), if its gate passed and
    every other stable name stays at one cut with it (else it refuses, naming the pins; `--only`).
    Names every pin of the commit whose consistency was not evaluated, and why."""
    from kappa.delta.registry import Registry
    from kappa.lifecycle import promotion
    from kappa.lifecycle.cut import unverified

    registry = Registry(settings)  # the command's one snapshot: it sees its own promotion
    promotion.promote(settings, asset, version, only=only, registry=registry)
    console.print(f"{asset} -> v{version}")
    print_unverified(unverified(promotion.commit_pins(registry, asset)))


@app.command("advance")
@guarded
def advance(
    settings: Settings,
    assets: Optional[list[str]] = typer.Argument(None, help="Move only the lineages of these assets (default: all)."),
    wait: float = typer.Option(30.0, "--wait", help="Seconds to keep trying while running queries have not "
                               "yet read a common upstream version."),
    fmt: StatusFormat = format_option(),
) -> None:
    """Move the cut forward: pin every promoted stable name at the newest Delta snapshot where all of
    them agree (each covers exactly what the tables it reads hold), in one registry commit. Names
    every new pin whose consistency was not evaluated, and why (json: ``unverified``), and every
    pin left before its table's latest micro-batch, with the reader that holds it and why (json:
    ``held_back``)."""
    from kappa.lifecycle.cut import advance as advance_cut

    report = advance_cut(settings, assets or None, wait_s=wait)
    if fmt == StatusFormat.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        print_advance(report)
    if report.refused:
        raise typer.Exit(1)


class NameMover:
    """``kappa run --continuous``'s ``on_poll``: every ``every_s`` seconds (monotonic clock), the
    cut advanced over the lineages of ``assets`` (None: all) as :func:`move_names` does, the first
    time ``every_s`` after the start."""

    def __init__(self, settings: Settings, assets: list[str] | None, every_s: float):
        self.settings, self.assets, self.every_s = settings, assets, every_s
        self.due = time.monotonic() + every_s

    def __call__(self) -> None:
        if time.monotonic() >= self.due:
            move_names(self.settings, self.assets, say_unmoved=False)
            self.due = time.monotonic() + self.every_s


def move_names(settings: Settings, assets: list[str] | None, say_unmoved: bool = True) -> None:
    """After a bounded ``kappa run`` (and on an interval of a continuous one): advance the cut over
    the promoted lineages of ``assets`` (None: all) (:func:`kappa.lifecycle.cut.advance`, one
    registry commit, reason ``run``; a running reader that has not caught up is waited for at most
    5 s) and print it as ``kappa advance`` does (:func:`print_advance`; ``say_unmoved``: also that
    nothing moved). Prints nothing when none of them is promoted."""
    from kappa.lifecycle.cut import advance as advance_cut

    report = advance_cut(settings, assets, reason="run", wait_s=5.0)
    if report.pins or report.refused:  # else nothing the run touched is promoted: no name reads it
        print_advance(report, label="stable name ", say_unmoved=say_unmoved)


def print_advance(report, label: str = "", say_unmoved: bool = True) -> None:
    """A :class:`kappa.lifecycle.cut.AdvanceReport` on the console: the pins not evaluated, the pins
    held back, one ``<label><asset>: Delta version <before> -> <after>`` per name moved (or, with
    ``say_unmoved``, that none moved), and each lineage not moved with why."""
    print_unverified(report.unverified)
    print_held_back(report.held_back)
    for asset, (before, after) in sorted(report.moved.items()):
        console.print(f"{label}{asset}: Delta version {'latest' if before is None else before} -> {after}")
    if not report.moved and say_unmoved:
        console.print("the cut is already at the newest consistent snapshot")
    for group, why in report.refused.items():
        console.print(f"[red]not moved[/] ({group}): {why}")


def pin_verification(asset: str, pin: dict | None) -> dict:
    """``verified`` and ``why_unverified`` of a recorded pin (:func:`kappa.lifecycle.cut.unverified`)
    for the JSON of ``versions`` and ``status``; both None for a version never pinned."""
    from kappa.lifecycle.cut import unverified

    if pin is None:
        return {"verified": None, "why_unverified": None}
    return {"verified": bool(pin.get("verified")), "why_unverified": unverified({asset: pin}).get(asset)}


def print_held_back(why: dict[str, str]) -> None:
    """One line per pin before its table's latest micro-batch: which reader holds it, and why
    (asset -> line, :func:`kappa.lifecycle.cut.held_back`)."""
    for _asset, reason in sorted(why.items()):
        console.print(f"[yellow]held back[/] {reason}", highlight=False)


def print_unverified(why: dict[str, str]) -> None:
    """One line per pin whose consistency was not evaluated (asset -> why)."""
    for _asset, reason in sorted(why.items()):
        console.print(f"[yellow]pin not verified[/] {reason}", highlight=False)


@app.command("rollback")
@guarded
def rollback(settings: Settings, asset: str) -> None:
    """Point the stable names promoted with ASSET (its chain) back at their previously promoted
    versions, in one registry commit (naming every pin not verified, as `kappa promote`); on
    Kubernetes their queries then run again from their checkpoints (the promotion that replaced
    them had deleted their SparkApplications)."""
    from kappa.delta.registry import Registry
    from kappa.lifecycle import promotion
    from kappa.lifecycle.cut import unverified

    registry = Registry(settings)  # the command's one snapshot: it sees its own rollback
    targets = promotion.rollback(settings, asset, on_step=lambda m: console.print(m), registry=registry)
    console.print(", ".join(f"{a} -> v{v}" for a, v in targets.items()) + " (rolled back)")
    print_unverified(unverified(promotion.commit_pins(registry, asset)))


if __name__ == "__main__":  # pragma: no cover
    app()
