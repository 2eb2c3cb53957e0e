"""``kappa forget``: delete a record key from every table derived from a topic, and list the
requests (``--status``)."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from kappa.cli.command import guarded
from kappa.cli.output import StatusFormat, console, format_option
from kappa.config import Settings
from kappa.core.guard import fail


@guarded
def forget(
    settings: Settings,
    topic: Optional[str] = typer.Option(None, "--topic", help="The topic the key was published to."),
    key: Optional[str] = typer.Option(None, "--key", help="The record key to forget (UTF-8; for flights, the tailnum; for a changelog topic, its key column's value or a JSON object of its key columns)."),
    reason: str = typer.Option("", "--reason", help="Why (kept with the request)."),
    truncate_log: bool = typer.Option(False, "--truncate-log", help="Also delete the log prefix up to the key's last "
                                      "offset (Kafka DeleteRecords): every older record of every key is lost and "
                                      "replays of the topic refuse from then on."),
    status: bool = typer.Option(False, "--status", help="List forget requests and what was done for each."),
    fmt: StatusFormat = format_option("text or json (with --status)"),
) -> None:
    """Delete a record key from every table version derived from TOPIC, keep it out of every later
    run and replay, and from the log where Kafka allows. Resumes an unfinished request. Time travel
    to before the forget is gone (the old files are vacuumed)."""
    from kappa.lifecycle import forget as forgetting

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
        elif step == "checkpoints":
            parts.append("deleted the checkpoints of " + (", ".join(d.get("checkpoints", {})) or "no stateful version"))
        elif step == "vacuumed":
            parts.append(f"vacuumed {len(d.get('files_removed', {}))} tables")
        elif step == "log":
            parts.append("log: " + "; ".join(f"{k} {v}" for k, v in d.items()))
        elif step == "done":
            parts.append("done")
    return "; ".join(parts)
