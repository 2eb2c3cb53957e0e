"""The sustained-rate judge of `kappa bench`: flat only when the backlog left after each
micro-batch (the troughs of the saw-tooth) does not grow."""

from __future__ import annotations

from kappa.harness.bench.judge import judge_flat, slope, troughs

RATE = 32_000.0  # offered events/s


def saw_tooth(trough_growth_per_s: float, seconds: float = 60, batch_s: float = 8, base: float = 260_000):
    """Samples every 0.5 s: the backlog climbs at RATE between commits and drops by what the batch
    took; the level it drops to grows by ``trough_growth_per_s``."""
    out, t = [], 0.0
    while t < seconds:
        into_batch = t % batch_s
        trough = base + trough_growth_per_s * (t - into_batch)
        out.append((t, trough + RATE * into_batch))
        t += 0.5
    return out


def test_a_rising_saw_tooth_is_not_flat_even_when_its_peaks_look_level():
    # The run: troughs from 260,000 to 307,000 over a minute (~780 ev/s, 2.4 % of the rate).
    samples = saw_tooth(trough_growth_per_s=780)
    verdict = judge_flat(samples, RATE)
    assert not verdict["flat"]
    assert 700 < verdict["trough_slope"] < 860 and verdict["troughs"] >= 6


def test_a_flat_saw_tooth_is_flat():
    verdict = judge_flat(saw_tooth(trough_growth_per_s=0), RATE)
    assert verdict["flat"] and abs(verdict["trough_slope"]) < 1 and verdict["troughs"] >= 6


def test_an_always_empty_backlog_is_flat_and_a_steady_climb_is_not():
    assert judge_flat([(t * 0.5, 0) for t in range(40)], RATE)["flat"]
    assert not judge_flat([(t * 0.5, 1_000 * t) for t in range(40)], RATE)["flat"]


def test_troughs_are_the_bottoms_of_the_drops_and_slope_is_least_squares():
    samples = [(0, 5), (1, 10), (2, 2), (3, 1), (4, 8), (5, 3), (6, 9)]
    assert troughs(samples) == [(3, 1), (5, 3)]
    assert slope([(0, 1), (1, 3), (2, 5)]) == 2.0
