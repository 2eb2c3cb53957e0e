"""Dagster's GraphQL API as the UI calls it, for the tests that start a webserver (`dagster dev`,
`dg dev`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


def post(url: str, query: str, timeout: float = 60, variables: dict | None = None) -> dict:
    """POST ``query`` (with ``variables``) to ``url`` (``…/graphql``) and return the JSON answer.
    GraphQL reports query errors with status 400 and a JSON body (returned as is); a server that
    does not answer yet gives ``{"errors": [<why>]}``."""
    req = urllib.request.Request(url, data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
        return {"errors": [str(err)]}


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

RUN = """
query Run($runId: ID!) {
  runOrError(runId: $runId) { __typename ... on Run { status stepStats { stepKey startTime endTime } } }
  logsForRun(runId: $runId) { ... on EventConnection { events {
    __typename
    ... on ExecutionStepFailureEvent { stepKey error { message } }
    ... on ExecutionStepOutputEvent { stepKey outputName metadataEntries { label } }
  } } }
}
"""


def launch(base: str, job: str, run_config: dict | None = None, assets: list[str] | None = None,
           location: str = "kappa") -> str:
    """Launch ``job`` (or, with ``assets``, a materialization of those asset keys) on the webserver
    at ``base`` as the launchpad does; return the run id. Fails with the server's answer."""
    selector = {"repositoryLocationName": location, "repositoryName": "__repository__", "pipelineName": job}
    if assets:
        selector["assetSelection"] = [{"path": [a]} for a in assets]
    answer = post(f"{base}/graphql", LAUNCH, variables={"params": {
        "selector": selector, "runConfigData": run_config or {}, "mode": "default"}})
    result = (answer.get("data") or {}).get("launchPipelineExecution") or {}
    assert result.get("__typename") == "LaunchRunSuccess", answer
    return result["run"]["runId"]


def wait_for_run(base: str, run_id: str, timeout: float = 300) -> tuple[str, list[dict]]:
    """(status, events) of run ``run_id`` once it has ended (``SUCCESS``, ``FAILURE``, ``CANCELED``):
    events are its step failures and step outputs, as :data:`RUN` selects them, then one
    ``{"__typename": "StepStats", "stepKey", "seconds"}`` per step that ran."""
    deadline = time.monotonic() + timeout
    while True:
        answer = post(f"{base}/graphql", RUN, variables={"runId": run_id})
        data = answer.get("data") or {}
        status = (data.get("runOrError") or {}).get("status")
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            events = [e for e in data["logsForRun"]["events"] if e.get("stepKey")]
            events += [{"__typename": "StepStats", "stepKey": st["stepKey"],
                        "seconds": round(st["endTime"] - st["startTime"], 1)}
                       for st in data["runOrError"]["stepStats"] if st.get("startTime") and st.get("endTime")]
            return status, events
        assert time.monotonic() < deadline, f"run {run_id} still {status} after {timeout:.0f} s"
        time.sleep(1)
