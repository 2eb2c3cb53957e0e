"""The console text of a failed streaming query (kappa.runners.base.query_error)."""

from kappa.runners.base import query_error

# The shape of str(StreamingQueryException) in PySpark 4.1: the message, then Spark's description
# of the query (its id, offsets and the logical plan).
FAILED = """Python worker failed to connect back.
=== Streaming Query ===
Identifier: delay_streaks_v1
Current Committed Offsets: {}
Current Available Offsets: {DeltaSource: {"sourceVersion":1}}

Current State: ACTIVE
Thread State: RUNNABLE

Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink, af4fb623, , Append
+- LocalRelation <empty>
"""


def test_the_query_description_is_left_to_the_log_file():
    assert query_error(RuntimeError(FAILED)) == "Python worker failed to connect back."


def test_a_message_without_a_description_is_kept_whole():
    assert query_error(ValueError("[DELTA_FOO] two\nlines")) == "[DELTA_FOO] two\nlines"
    assert query_error(None) == ""
