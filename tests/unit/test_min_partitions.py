"""Kafka reads split into tasks that fill every core (kappa.streaming.sources.min_partitions)."""

from __future__ import annotations

from kappa.streaming.sources import min_partitions


def test_partitions_that_leave_a_core_idle_are_split_into_a_multiple_of_the_cores():
    # Spark rounds each range's share of minPartitions: lcm gives whole splits of equal ranges
    assert min_partitions(3, 2) == 6  # the shipped topics on this machine: 3 full waves
    assert min_partitions(3, 8) == 24 and min_partitions(1, 4) == 4
    assert min_partitions(4, 6) == 12


def test_partitions_that_fill_every_wave_or_would_need_many_splits_are_one_task_each():
    assert min_partitions(4, 2) is None and min_partitions(2, 2) is None and min_partitions(24, 8) is None
    assert min_partitions(24, 10) is None  # lcm 120: five splits per partition
    assert min_partitions(1, 1) is None and min_partitions(0, 2) is None
