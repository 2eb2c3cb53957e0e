"""The ``forget_key`` job: ``kappa forget --topic T --key K --reason R [--truncate-log]`` from the UI
(Jobs -> forget_key -> Launchpad), the same library function, :func:`kappa.lifecycle.forget.forget`:

.. code-block:: yaml

    ops:
      forget_record_key:
        config:
          topic: flights
          key: N12345                 # the record key (flights: the tailnum)
          reason: "data subject request 2026-118"
          truncate_log: false         # kappa forget's default

It deletes the key from every table version derived from the topic, replays the aggregates and the
stateful assets, deletes the older stateful checkpoints, vacuums, and reports on the log (see
:mod:`kappa.lifecycle.forget`); run again with the same topic and key, it resumes an unfinished
request or does nothing. ``topic``, ``key`` and ``reason`` are required (a run config without one
does not launch); an empty key or a blank reason fails the step when Dagster validates the config,
before anything is read or deleted. (Dagster's config schema has no string constraints, so that
check is the ``Config`` class's, at step start, not the launchpad's.)

The step's output (and metadata) is the request as recorded: ``request_id``, ``key_sha256`` (the
key itself is never logged nor put in metadata), ``state``, the steps this run ran (``ran``) and
what each step did (``records_located``, ``rows_deleted``, ``replayed``, ``checkpoints_deleted``,
``files_removed``, ``log``). A :class:`~kappa.errors.KappaError` (an unknown topic, a failed replay)
fails the step with the library's message; a later run resumes.

**The key is in the run's config.** Dagster keeps a run's config in its run storage, so the key
launched here stays in the clear there (``kappa forget``'s command line has the same problem in a
shell's history). Delete the run afterwards (Runs -> the run -> Delete) where that matters. One
forget runs at a time (pool ``kappa_forget``).
"""

import dagster as dg
from pydantic import Field, field_validator

from kappa.dagster.names import FORGET_JOB, LoadOptions
from kappa.errors import KappaError


class ForgetConfig(dg.Config):
    """Run config of ``forget_key`` (``kappa forget --topic --key --reason [--truncate-log]``)."""

    topic: str = Field(description="The topic the key was published to (as in assets/topics.yaml).")
    key: str = Field(min_length=1, description="The record key to forget (UTF-8; for flights, the tailnum; for a "
                     "changelog topic, its key column's value or a JSON object of its key columns).")
    reason: str = Field(description="Why the key is forgotten (kept with the request; required).")
    truncate_log: bool = Field(False, description="Also delete the log prefix up to the key's last offset (Kafka "
                               "DeleteRecords): every older record of every key is lost and replays of the topic "
                               "refuse from then on (kappa forget --truncate-log; default off).")

    @field_validator("reason")
    @classmethod
    def _says_why(cls, reason: str) -> str:
        # The library's own rule (forget refuses a reason that is only blanks), checked before the run
        # touches anything.
        if not reason.strip():
            raise ValueError("reason must say why the key is forgotten (it is kept with the request)")
        return reason


def build_forget_job(options: LoadOptions) -> dg.JobDefinition:
    """The ``forget_key`` job (module docstring): one op, ``forget_record_key``, configured by
    :class:`ForgetConfig`; needs the ``kappa`` resource."""

    @dg.op(name="forget_record_key", required_resource_keys={"kappa"}, tags={"kind": "spark"}, pool="kappa_forget",
           out=dg.Out(dict, description="The forget request as recorded: request_id, topic, key_sha256, state, "
                                        "ran, steps."))
    def forget_op(context: dg.OpExecutionContext, config: ForgetConfig) -> dg.Output:
        from kappa.lifecycle.forget import forget, step_summary

        kappa = context.resources.kappa
        settings = kappa.settings(assets_dir=str(options.assets_path))
        try:
            report = forget(settings, config.topic, config.key, config.reason, truncate_log=config.truncate_log,
                            on_step=lambda step, details: context.log.info(step_summary(step, details)))
        except KappaError as exc:  # an unknown topic, a failed replay, a cut that would not move, …
            raise dg.Failure(description=str(exc), metadata={"topic": config.topic}) from exc
        req, steps = report.request, report.request.steps
        summary = {"request_id": req.request_id, "topic": req.topic, "key_sha256": req.key_sha256,
                   "reason": req.reason, "state": req.state, "ran": list(report.ran), "seconds": report.seconds,
                   "steps": steps}
        context.log.info(f"forgot a key on {req.topic} (request {req.request_id}, SHA-256 {req.key_sha256[:16]}…) "
                         f"in {report.seconds:.1f} s; time travel to before the forget is no longer possible")
        located, deleted = steps.get("located", {}), steps.get("deleted", {})
        return dg.Output(summary, metadata={
            "request_id": req.request_id,
            "topic": req.topic,
            "key_sha256": req.key_sha256,
            "state": req.state,
            "ran": dg.MetadataValue.json(list(report.ran)),
            "seconds": float(report.seconds),
            "records_located": int(located.get("records", 0)),
            "rows_deleted": int(deleted.get("rows", 0)),
            "tables_deleted_from": dg.MetadataValue.json({p: n for p, n in deleted.get("tables", {}).items() if n}),
            "replayed": dg.MetadataValue.json(steps.get("replayed", {})),
            "checkpoints_deleted": dg.MetadataValue.json(steps.get("checkpoints", {}).get("checkpoints", {})),
            "files_removed": dg.MetadataValue.json(steps.get("vacuumed", {}).get("files_removed", {})),
            "log": dg.MetadataValue.json(steps.get("log", {})),
        })

    @dg.job(name=FORGET_JOB, tags={"kappa/kind": "forget"},
            description="Delete a record key from every table version derived from a topic and keep it out of every "
                        "later run and replay (kappa forget --topic T --key K --reason R).")
    def forget_job():
        forget_op()

    return forget_job
