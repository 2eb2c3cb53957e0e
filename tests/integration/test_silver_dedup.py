"""Silver deduplicates on-time events in Spark's state store and checks only the events behind the
watermark against its table (issue 19): a duplicate arriving after a restart is still dropped,
whichever of the two finds it, and a re-ingest of the whole log changes nothing."""

from __future__ import annotations

import dataclasses
import json

import pytest
from deltalake import DeltaTable

from kappa.delta.registry import late_events_path
from kappa.ingest.nycflights13 import load_events, publish
from kappa.runners import run_until_caught_up

from .helpers import renamed, table

pytestmark = pytest.mark.integration


def test_a_duplicate_arriving_after_a_restart_is_still_dropped(make_env, spark):
    settings, suffix = make_env()
    flights = [e for e in renamed(load_events(limit=1_000), suffix) if e.topic.startswith("flights")]
    publish(settings, flights)
    run_until_caught_up(settings, ["flights"], spark=spark)  # batch 0: the watermark now ~ 2 h behind the latest
    first = table(settings, "flights")
    assert len(first) == 1_000 and first["event_id"].is_unique

    # Restart, every event sent again. Batch 1 drops nothing as late (the watermark of the batch
    # before it is 0), so every copy reaches the state store restored from the checkpoint; the
    # anti-join against the table is off, so only the state store can drop them.
    publish(settings, flights)
    no_table = settings.model_copy(update={"dedup_anti_join": False})
    run_until_caught_up(no_table, ["flights"], spark=spark)
    assert len(table(settings, "flights")) == 1_000

    # Restart, everything sent a third time, and one new event from long ago. Now most copies are
    # behind the watermark of the batch before (the state store drops them as late): they are read
    # again and found in the table; the newest are found in the state store. The new event is late.
    far_past = dataclasses.replace(
        flights[0], keys=[b"late"], event_ids=["late-1"], timestamps_ms=flights[0].timestamps_ms[:1],
        values=[json.dumps({**json.loads(flights[0].values[0]), "event_id": "late-1",
                            "event_time": "2012-12-31T23:00:00Z"}).encode()])
    publish(settings, [*flights, far_past])
    [result] = run_until_caught_up(settings, ["flights"], spark=spark)

    silver = table(settings, "flights")
    assert len(silver) == 1_000 and set(silver["event_id"]) == set(first["event_id"])
    late = DeltaTable(str(late_events_path(settings))).to_pandas()
    assert list(late["event_id"]) == ["late-1"] and result.late_events == 1
    assert result.input_rows == 1_001 and result.quarantined == 0
