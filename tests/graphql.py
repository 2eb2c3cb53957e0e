"""Dagster's GraphQL API as the UI calls it, for the tests that start a webserver (`dagster dev`,
`dg dev`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def post(url: str, query: str, timeout: float = 60) -> dict:
    """POST ``query`` to ``url`` (``…/graphql``) and return the JSON answer. GraphQL reports query
    errors with status 400 and a JSON body (returned as is); a server that does not answer yet gives
    ``{"errors": [<why>]}``."""
    req = urllib.request.Request(url, data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
        return {"errors": [str(err)]}
