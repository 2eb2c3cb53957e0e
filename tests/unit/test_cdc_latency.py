from kappa.harness.cdc_latency import percentiles


def test_percentiles_are_nearest_rank():
    assert percentiles([]) == {"n": 0}
    assert percentiles([2.0]) == {"n": 1, "p50_s": 2.0, "p99_s": 2.0, "max_s": 2.0}
    samples = [float(i) for i in range(1, 101)]  # 1 … 100
    assert percentiles(samples) == {"n": 100, "p50_s": 50.0, "p99_s": 99.0, "max_s": 100.0}
    assert percentiles([3.0, 1.0, 2.0])["p50_s"] == 2.0
