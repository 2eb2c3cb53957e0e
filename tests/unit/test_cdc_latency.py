from kappa.harness.cdc_latency import judge_cdc, percentiles


def test_percentiles_are_nearest_rank():
    assert percentiles([]) == {"n": 0}
    assert percentiles([2.0]) == {"n": 1, "p50_s": 2.0, "p99_s": 2.0, "max_s": 2.0}
    samples = [float(i) for i in range(1, 101)]  # 1 … 100
    assert percentiles(samples) == {"n": 100, "p50_s": 50.0, "p99_s": 99.0, "max_s": 100.0}
    assert percentiles([3.0, 1.0, 2.0])["p50_s"] == 2.0


def test_the_cdc_targets_are_judged_on_the_overall_percentiles():
    # the README's measurement before issue 19: p50 13.3 s, p99 16.1 s -> both missed
    missed = judge_cdc({"n": 158, "p50_s": 13.3, "p99_s": 16.1, "max_s": 16.6})
    assert missed == [{"target": "CDC change-to-table p50 <= 2 s", "value": 13.3, "met": False},
                      {"target": "CDC change-to-table p99 <= 5 s", "value": 16.1, "met": False}]
    # bounds are inclusive; p50 can be met while p99 is missed
    assert [j["met"] for j in judge_cdc(percentiles([2.0] * 98 + [5.0, 5.1]))] == [True, True]
    assert [j["met"] for j in judge_cdc(percentiles([1.0] * 90 + [6.0] * 10))] == [True, False]
    # nothing measured: not evaluated, never "met"
    assert [j["met"] for j in judge_cdc(percentiles([]))] == [None, None]
