"""The ``forget_key`` job: a *request* to forget a record key (Jobs -> forget_key -> Launchpad),
recorded in the registry by :func:`kappa.lifecycle.approval.request_forget`; nothing is deleted
until someone with the platform role runs ``kappa approve REQUEST`` (then
:func:`kappa.lifecycle.forget.forget` runs, as ``kappa forget`` does):

.. code-block:: yaml

    ops:
      request_forget:
        config:
          topic: flights
          key_sha256: 5f2b…           # SHA-256 of the key, 64 hex digits: printf %s N12345 | sha256sum
          reason: "data subject request 2026-118"
          requested_by: "ana@example.com"   # shown as claimed: Dagster OSS has no login
          truncate_log: false         # kappa forget --truncate-log; default off

**The key is not in the run config, by design.** Dagster keeps every run's config in its run
storage and shows it to everyone who can read the UI (no config field is kept out of it, and
nothing rewrites it after launch), so the request names the key by the SHA-256 of its canonical
bytes: the key's UTF-8 (for a changelog topic, the compact JSON of its key columns; its approval
then needs the key itself, ``kappa approve REQUEST --key K``). The forget finds the key's records
and rows by hash. ``topic``, ``key_sha256``, ``reason`` and ``requested_by`` are required; a hash
that is not 64 hex digits, an unknown topic or a blank reason fails the step with one line, before
anything is recorded.

The step's output (and metadata) is the request as recorded: ``request_id``, ``topic``,
``key_sha256``, ``state`` (``pending``) and how to approve it.
"""

import dagster as dg
from pydantic import Field

from kappa.dagster.names import FORGET_JOB, LoadOptions
from kappa.dagster.failure import as_failure


class ForgetConfig(dg.Config):
    """Run config of ``forget_key``: a forget request (``kappa approve`` runs it)."""

    topic: str = Field(description="The topic the key was published to (as in assets/topics.yaml).")
    key_sha256: str = Field(description="SHA-256 of the record key, 64 hex digits (`printf %s KEY | sha256sum`; "
                            "for a changelog topic, of the compact JSON of its key columns, "
                            "{\"tailnum\":\"N12345\"}). Never the key itself: run configs are stored and shown.")
    reason: str = Field(description="Why the key is forgotten (kept with the request; required).")
    requested_by: str = Field(description="Who asks (shown as claimed: the UI has no login; the approver is "
                              "verified).")
    truncate_log: bool = Field(False, description="Also delete the log prefix up to the key's last offset (Kafka "
                               "DeleteRecords): every older record of every key is lost and replays of the topic "
                               "refuse from then on (kappa forget --truncate-log; default off).")


def build_forget_job(options: LoadOptions) -> dg.JobDefinition:
    """The ``forget_key`` job (module docstring): one op, ``request_forget``, configured by
    :class:`ForgetConfig`; needs the ``kappa`` resource. Records a request, deletes nothing."""

    @dg.op(name="request_forget", required_resource_keys={"kappa"},
           out=dg.Out(dict, description="The forget request as recorded: request_id, topic, key_sha256, state."))
    def request_op(context: dg.OpExecutionContext, config: ForgetConfig) -> dg.Output:
        from kappa.lifecycle.approval import request_forget

        settings = context.resources.kappa.settings(assets_dir=str(options.assets_path))
        with as_failure(topic=config.topic):  # a bad hash, an unknown topic, a blank reason
            req = request_forget(settings, config.topic, config.key_sha256, config.reason,
                                 truncate_log=config.truncate_log, claimed_by=config.requested_by,
                                 origin=f"dagster run {context.run_id}")
        how = f"kappa approve {req.request_id}"
        context.log.info(f"recorded request {req.request_id}: {req.describe()}, claimed by {req.claimed_by}; "
                         f"nothing is deleted until someone with the platform role runs `{how}`")
        summary = {"request_id": req.request_id, "topic": config.topic, "key_sha256": req.params["key_sha256"],
                   "state": req.state, "approve_with": how}
        return dg.Output(summary, metadata={k: str(v) for k, v in summary.items()})

    @dg.job(name=FORGET_JOB, tags={"kappa/kind": "forget"},
            description="Request that a record key be deleted from every table version derived from a topic (runs "
                        "after `kappa approve REQUEST`; the key is named by its SHA-256).")
    def forget_job():
        request_op()

    return forget_job
