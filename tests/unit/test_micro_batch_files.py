"""How many files a micro-batch's append writes (kappa.streaming.writers.files_for)."""

from __future__ import annotations

import pytest

from kappa.streaming.writers import ROWS_PER_FILE, files_for


@pytest.mark.parametrize("rows, files", [
    (0, 1), (1, 1), (ROWS_PER_FILE, 1), (ROWS_PER_FILE + 1, 2), (336_776, 7), (10 * ROWS_PER_FILE, 10),
])
def test_a_small_batch_is_one_file_and_a_large_one_keeps_its_parallelism(rows, files):
    assert files_for(rows) == files


def test_the_rows_per_file_bound_is_a_parameter():
    assert files_for(10, rows_per_file=3) == 4
