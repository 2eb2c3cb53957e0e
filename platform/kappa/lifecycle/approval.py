"""Requests that destroy data, and their approval: ``kappa requests``, ``kappa approve REQUEST``.

A forget (:mod:`kappa.lifecycle.forget`) deletes rows from every version and vacuums away time
travel; a maintenance with a retention of its own (:mod:`kappa.lifecycle.maintain`) shortens the
time travel readers count on. From the Dagster UI, which has no login (Dagster OSS: whoever
reaches the webserver launches jobs), neither runs: the ``forget_key`` and ``maintain`` jobs only
*record a request* (:func:`request_forget`, :func:`request_maintain`), and the request runs when
someone with the platform role approves it with ``kappa approve REQUEST`` (:func:`approve`).

Everything is kept in the registry (:class:`kappa.delta.registry.Registry`) as events of the
pseudo-asset :data:`kappa.delta.registry.REQUESTS`: ``requested`` (the kind, its parameters, the
requester as *claimed*, where it came from), ``approved`` (the approver's *verified* identity,
:func:`approver_identity`), then ``request_done`` (the outcome) or ``request_failed`` (the error).
A failed request can be approved again (a forget resumes where it stopped).

**Keys are never in the clear here.** A forget request names its key by SHA-256 (hex) of its
canonical bytes (:func:`kappa.delta.forgotten.record_key`: the key's UTF-8, ``printf %s KEY |
sha256sum``; for a changelog topic the compact JSON of its key columns), so neither the Dagster run
config (kept in Dagster's run storage, shown to every UI reader) nor the registry holds it. The
forget finds the key's records and rows by hash (every predicate it hands Delta compares hashes
already). A changelog topic's key columns are compared one by one, so its approval needs the key
itself (``kappa approve REQUEST --key K``, checked against the hash).

Identity: the requester's ``claimed_by`` is free text, shown as claimed. The approver is who the
platform says: on the ``local`` runner the operating system's user of the process (``pwd`` on the
effective uid, not ``$USER``, which the caller sets); on the ``kubernetes`` runner the identity the
API server authenticated, from a ``SelfSubjectReview`` (Kubernetes docs, "Authenticating" ->
"API access to authentication information for a client"; GA in 1.28). A service account (a pod:
a Dagster run, a driver) cannot approve: only a person's credentials can.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kappa.config import Settings
from kappa.delta.registry import REQUESTS, Registry
from kappa.errors import KappaError

#: The kinds of request and what ``kappa approve`` runs for each.
KINDS = ("forget", "maintain")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ApprovalError(KappaError, ValueError):
    """A request that cannot be recorded or approved (bad parameters, unknown or finished request,
    an approver whose identity cannot be established or is not a person's)."""


@dataclass
class Request:
    """One request folded from its registry events. ``params``: the kind's parameters (forget:
    ``topic``, ``key_sha256``, ``reason``, ``truncate_log``; maintain: ``assets``,
    ``retention_hours``); ``claimed_by``: the requester as they named themselves (unverified);
    ``origin``: where it was recorded (``dagster run <id>``); ``approvals``: each ``approved``
    event's details (``approver``, ``at``); ``outcome``/``error``: the last result."""

    request_id: str
    kind: str
    params: dict
    claimed_by: str
    origin: str
    requested_at: datetime
    approvals: list[dict] = field(default_factory=list)
    outcome: dict | None = None
    error: str | None = None

    @property
    def state(self) -> str:
        """``pending`` (never approved), ``approved`` (running, or stopped before an outcome),
        ``done`` or ``failed`` (approve again to retry)."""
        if self.outcome is not None:
            return "done"
        if self.error is not None:
            return "failed"
        return "approved" if self.approvals else "pending"

    def describe(self) -> str:
        """One line naming what the request does (never a key: its SHA-256's first 16 hex digits)."""
        p = self.params
        if self.kind == "forget":
            return (f"forget key SHA-256 {p['key_sha256'][:16]}… on {p['topic']}"
                    f"{' and truncate the log' if p.get('truncate_log') else ''} ({p['reason']})")
        retention = p.get("retention_hours")
        return (f"maintain {', '.join(p.get('assets') or []) or 'every asset'} with VACUUM retention "
                f"{'of each table' if retention is None else f'{retention:g} h'}")


def requests(settings: Settings, registry: Registry | None = None) -> list[Request]:
    """Every request, oldest first, folded from the registry's approval events (``registry``: the
    command's snapshot; default: a new one)."""
    out: dict[str, Request] = {}
    for e in (registry or Registry(settings)).events(REQUESTS):
        d = e["details"]
        rid = d.get("request_id")
        if e["event"] == "requested":
            out[rid] = Request(rid, d["kind"], d["params"], d.get("claimed_by", ""), d.get("origin", ""), e["at"])
        elif rid in out:
            req = out[rid]
            if e["event"] == "approved":
                req.approvals.append({"approver": d.get("approver"), "at": e["at"]})
                req.outcome, req.error = None, None  # a new attempt
            elif e["event"] == "request_done":
                req.outcome = d.get("outcome", {})
            elif e["event"] == "request_failed":
                req.error = d.get("error", "")
    return list(out.values())


def request(settings: Settings, request_id: str, registry: Registry | None = None) -> Request:
    """The request ``request_id`` (in ``registry``, the command's snapshot; default: a new one).
    Raises :class:`ApprovalError` naming the pending ones when there is none."""
    found = requests(settings, registry)
    for r in found:
        if r.request_id == request_id:
            return r
    pending = [r.request_id for r in found if r.state == "pending"]
    raise ApprovalError(f"no request {request_id!r} (pending: {', '.join(pending) or 'none'}; see `kappa requests`)")


def _record(registry: Registry, event: str, **details: object) -> None:
    registry.record(REQUESTS, 0, event, **details)


def _new(settings: Settings, kind: str, params: dict, claimed_by: str, origin: str) -> Request:
    if not claimed_by.strip():
        raise ApprovalError("requested_by must name who asks (it is shown as claimed, next to the request)")
    rid = uuid.uuid4().hex[:12]
    registry = Registry(settings)  # the command's one snapshot: it sees the request it records
    _record(registry, "requested", request_id=rid, kind=kind, params=params, claimed_by=claimed_by, origin=origin)
    return request(settings, rid, registry)


def request_forget(settings: Settings, topic: str, key_sha256: str, reason: str, *, truncate_log: bool = False,
                   claimed_by: str, origin: str = "") -> Request:
    """Record a request to forget the key whose canonical bytes hash to ``key_sha256`` (64 hex
    digits) on ``topic`` (module doc); nothing is deleted until :func:`approve`. Raises
    :class:`ApprovalError` for a malformed hash, an unknown topic, a blank reason or requester."""
    from kappa.delta.declarations import catalog as catalog_of

    digest = key_sha256.strip().lower()
    if not _SHA256.match(digest):
        raise ApprovalError(f"key_sha256 must be the key's SHA-256 in 64 hex digits (`printf %s KEY | sha256sum`), "
                            f"got {len(key_sha256)} characters")
    if not reason.strip():
        raise ApprovalError("reason must say why the key is forgotten (it is kept with the request)")
    catalog = catalog_of(settings)
    if topic not in catalog.topics:
        raise ApprovalError(f"unknown topic {topic!r}: not in {settings.assets_dir}/topics.yaml")
    params = {"topic": topic, "key_sha256": digest, "reason": reason, "truncate_log": bool(truncate_log)}
    return _new(settings, "forget", params, claimed_by, origin)


def request_maintain(settings: Settings, assets: list[str] | None, retention_hours: float, *, claimed_by: str,
                     origin: str = "") -> Request:
    """Record a request to run :func:`kappa.lifecycle.maintain.maintain` on ``assets`` (None: all)
    with VACUUM retention ``retention_hours``. Raises :class:`kappa.lifecycle.maintain.MaintainError`
    below the platform floor (refused outright, never recorded), :class:`kappa.spec.SpecError` for
    an unknown asset, :class:`ApprovalError` for a blank requester."""
    from kappa.delta.declarations import catalog as catalog_of
    from kappa.lifecycle.maintain import check_retention

    check_retention(settings, retention_hours)
    catalog = catalog_of(settings)
    for name in assets or []:
        catalog[name]  # an unknown name fails with the list of declared assets
    params = {"assets": list(assets or []), "retention_hours": float(retention_hours)}
    return _new(settings, "maintain", params, claimed_by, origin)


def approver_identity(settings: Settings, api_client=None) -> dict:
    """Who is approving, as the platform established it (module doc; the runner's ``identity``,
    :func:`kappa.runners.runner_class`): ``{"user", "source"}`` plus ``uid`` (local) or ``groups``
    (kubernetes). ``api_client``: a ``kubernetes.client.ApiClient``
    to ask with (default: the in-cluster service account, else the caller's kubeconfig,
    ``$KUBECONFIG`` or ``~/.kube/config``). Raises :class:`ApprovalError` when the API server cannot
    be asked or names a service account."""
    from kappa.runners import runner_class
    from kappa.runners.base import RunError

    try:
        who = runner_class(settings).identity(api_client)
    except RunError as exc:
        raise ApprovalError(f"cannot establish who approves: {exc}") from None
    if who["user"].startswith("system:serviceaccount:"):
        raise ApprovalError(f"{who['user']} is a service account (a pod's identity): only a person's "
                            "credentials may approve")
    return who


def approve(settings: Settings, request_id: str, *, key: str | None = None,
            say: Callable[[str], None] | None = None) -> Request:
    """Approve request ``request_id`` as :func:`approver_identity`, run it, and record the
    outcome; returns the request as recorded after it. ``key``: a forget's key, needed only on a
    changelog topic (checked against the request's hash). ``say(line)`` after each step.

    Raises :class:`ApprovalError` for an unknown or done request or an unknown approver; the run's
    own :class:`~kappa.errors.KappaError` (recorded as ``request_failed`` first)."""
    registry = Registry(settings)  # the command's one snapshot: the request's run goes through it
    req = request(settings, request_id, registry)
    if req.state == "done":
        who = req.approvals[-1]["approver"]["user"] if req.approvals else "?"
        raise ApprovalError(f"request {request_id} is done (approved by {who}); nothing to approve")
    approver = approver_identity(settings)
    _record(registry, "approved", request_id=request_id, approver=approver)
    if say is not None:
        say(f"approved by {approver['user']} ({approver['source']}): {req.describe()}, as claimed by {req.claimed_by}")
    try:
        outcome = _run(settings, req, key, say, registry)
    except BaseException as exc:
        _record(registry, "request_failed", request_id=request_id,
                error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        raise
    if outcome.pop("failed", None):
        _record(registry, "request_failed", request_id=request_id, error=outcome["error"], outcome=outcome)
        raise ApprovalError(f"request {request_id} failed: {outcome['error']}")
    _record(registry, "request_done", request_id=request_id, outcome=outcome)
    return request(settings, request_id, registry)


def _run(settings: Settings, req: Request, key: str | None, say: Callable[[str], None] | None,
         registry: Registry) -> dict:
    """Run an approved request; returns its outcome (``failed``/``error`` set when a maintenance
    table failed)."""
    p = req.params
    if req.kind == "forget":
        from kappa.lifecycle.forget import forget, step_summary

        report = forget(settings, p["topic"], key, p["reason"], key_sha256=p["key_sha256"],
                        truncate_log=p.get("truncate_log", False), registry=registry,
                        on_step=(lambda step, details: say(step_summary(step, details))) if say else None)
        steps = report.request.steps
        return {"forget_request": report.request.request_id, "state": report.request.state, "ran": report.ran,
                "records_located": steps.get("located", {}).get("records", 0),
                "rows_deleted": steps.get("deleted", {}).get("rows", 0), "seconds": report.seconds}
    if req.kind == "maintain":
        from kappa.lifecycle.maintain import maintain

        report = maintain(settings, p.get("assets") or None, retention_hours=p.get("retention_hours"), say=say,
                          registry=registry)
        out = {"tables": len(report.tables), "vacuumed": sum(t.vacuumed for t in report.tables),
               "retention_hours": report.retention_hours, "seconds": report.seconds}
        if report.failed:
            out.update(failed=True, error="maintenance failed for " + ", ".join(f"{t.table} ({t.error})"
                                                                               for t in report.failed))
        return out
    raise ApprovalError(f"request {req.request_id} has kind {req.kind!r}, not one of {KINDS}")
