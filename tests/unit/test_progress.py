"""Reading Structured Streaming progress reports (JSON shapes from Spark's StreamingQueryProgress)."""

from kappa.runners.local import kafka_offsets, records_read

KAFKA = "KafkaV2[Subscribe[t]]"
PROGRESS = [
    # numInputRows doubled: the foreachBatch body ran two actions over the source
    {"numInputRows": 600, "sources": [{"description": KAFKA, "startOffset": None,
                                       "endOffset": {"t": {"0": 100, "1": 200}}}]},
    {"numInputRows": 40, "sources": [{"description": KAFKA, "startOffset": {"t": {"0": 100, "1": 200}},
                                      "endOffset": '{"t":{"0":110,"1":210}}'}]},
    {"numInputRows": 7, "sources": [{"description": "DeltaSource[file:/x]", "startOffset": None,
                                     "endOffset": {"sourceVersion": 1}}]},
]


def test_records_read_counts_kafka_records_by_offsets_and_others_by_rows():
    assert records_read(PROGRESS) == 300 + 20 + 7


def test_a_first_batch_counts_from_the_log_start_it_was_given():
    # retention had deleted offsets below 40 and 50 when the version was created
    assert records_read(PROGRESS[:1], {"t": {"0": 40, "1": 50}}) == (100 - 40) + (200 - 50)


def test_kafka_offsets_take_the_last_report_and_skip_other_sources():
    assert kafka_offsets(PROGRESS) == {"t": {"0": 110, "1": 210}}
    assert kafka_offsets(PROGRESS, "startOffset") == {"t": {"0": 100, "1": 200}}
    assert kafka_offsets([]) == {}


def test_only_sparks_python_connect_back_timeout_restarts_a_query():
    from kappa.runners.local import restartable

    # the message a bounded run got from origin_load under load (Spark 4.1.3)
    assert restartable("origin_load/v1 failed: Python worker failed to connect back.\n=== Streaming Query ===")
    assert not restartable("[TASK_WRITE_FAILED] Task failed while writing rows ... Cannot convert Row into dict.")
    assert not restartable("[STREAM_FAILED] Query [id = 1] terminated with exception: Connection refused")
