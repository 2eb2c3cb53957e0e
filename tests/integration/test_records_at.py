"""Records read back from the real broker by their coordinates (:func:`kappa.kafka.topics.records_at`,
used by ``kappa declarations evolve``'s sample and by freshness): the records asked for, in the
order asked, across a gap long enough to seek past; none below the log start or past the end."""

from __future__ import annotations

import pytest

from kappa.ingest.producer import produce
from kappa.kafka.topics import READ_THROUGH, delete_records_before, records_at

from .helpers import flights_topic

pytestmark = pytest.mark.integration


def test_records_at_reads_what_is_asked_across_gaps_and_skips_what_the_log_lacks(make_env):
    settings, suffix = make_env()
    topic = flights_topic(settings, suffix)
    n = 2 * READ_THROUGH + 500
    # one key, so every record lands in one partition at offsets 0..n-1
    produce(settings, topic, [(b"k", f"v{i}".encode(), 1_000 + i) for i in range(n)])
    [partition] = {r.partition for r in records_at(settings, [(topic, p, 0) for p in range(3)])}
    delete_records_before(settings, topic, {partition: 100})

    far = n - 10  # more than READ_THROUGH past the one before it: a seek, not a read-through
    asked = [(topic, partition, far), (topic, partition, 150), (topic, partition, 5), (topic, partition, 151),
             (topic, partition, n + 3)]
    got = records_at(settings, asked)
    assert [(r.offset, r.value, r.key) for r in got] == [(far, f"v{far}".encode(), b"k"), (150, b"v150", b"k"),
                                                         (151, b"v151", b"k")]
    assert [r.topic for r in got] == [topic] * 3
