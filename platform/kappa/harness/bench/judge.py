"""The bench's verdicts: whether a sustained step kept up (:func:`judge_flat`, over the troughs of
the backlog's saw-tooth) and each target of a result (:func:`judge_targets`)."""

from __future__ import annotations


#: The targets, as ratios to U2 measured in the same run where a rate is concerned (issue 19).
REPLAY_OVER_U2 = 1.0
SUSTAINED_OVER_U2 = 0.6
LATENCY_P50_MS = 1_000
LATENCY_P99_MS = 3_000

def troughs(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The backlog left after each micro-batch: the bottom of every drop of the saw-tooth.

    ``samples``: (seconds, backlog in records) in time order; returns the trough samples. Without
    at least two drops (the backlog never fell: always empty, or only growing), every sample is
    returned, so the slope still sees a steady climb."""
    out = []
    for i in range(1, len(samples)):
        falling = samples[i][1] < samples[i - 1][1]
        ends_here = i + 1 == len(samples) or samples[i + 1][1] >= samples[i][1]
        if falling and ends_here:
            out.append(samples[i])
    return out if len(out) >= 2 else list(samples)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (records per second here); 0.0 for fewer than two points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def judge_flat(samples: list[tuple[float, float]], offered_rate: float, tolerance: float = 0.01) -> dict:
    """Whether a sustained step kept up: the least-squares slope through the troughs
    (:func:`troughs`, records/s) is at most ``tolerance`` (1 %) of the offered rate (records/s).
    A pipeline that keeps up ends every batch where it ended the last one; one that does not leaves
    a little more behind each time, however flat the peaks look. Returns ``flat``,
    ``trough_slope`` (records/s), the number of troughs and the first and last trough."""
    low = troughs(samples)
    s = slope(low)
    return {"flat": bool(low) and s <= tolerance * offered_rate, "trough_slope": round(s, 1), "troughs": len(low),
            "trough_first": int(low[0][1]) if low else None, "trough_last": int(low[-1][1]) if low else None}

def judge_targets(r: dict) -> list[dict]:
    """Each target of a bench result: ``target``, ``value``, ``met`` (None: not measured) and, when
    missed, ``holding``: the micro-batch phase with the largest share of the time of the query that
    sets it (the replay's for the replay target, the live query's for sustained and latency; see
    :func:`batch_breakdown`) with that ``share``; when that phase is ``addBatch``, also ``step``:
    the writer step inside it with the most Spark time (:func:`step_breakdown`), its ``step_share``
    and its tasks' ``step_run_ms`` and ``step_cpu_ms``."""
    def holder(pb: dict | None) -> dict:
        b = (pb or {}).get("breakdown") or {}
        phase = b.get("holding")
        if not phase:
            return {"holding": None}
        out = {"holding": phase, "share": b["phases"][phase]["share"]}
        steps = (pb or {}).get("steps") or {}
        if phase == "addBatch" and steps.get("holding"):
            # inside addBatch: the writer step with the most Spark time
            step = steps["steps"][steps["holding"]]
            out.update(step=steps["holding"], step_share=step["share"], step_cpu_ms=step["cpu_ms"],
                       step_run_ms=step["run_ms"])
        return out

    lat = r.get("latency_ms") or {}
    rows = [("replay >= %.1f x U2" % REPLAY_OVER_U2, r.get("replay_over_u2"),
             None if r.get("replay_over_u2") is None else r["replay_over_u2"] >= REPLAY_OVER_U2,
             r.get("replay", {}).get("per_batch")),
            ("sustained >= %.1f x U2" % SUSTAINED_OVER_U2, r.get("sustained_over_u2"),
             None if r.get("sustained_over_u2") is None else r["sustained_over_u2"] >= SUSTAINED_OVER_U2,
             r.get("live_per_batch")),
            (f"latency p50 <= {LATENCY_P50_MS} ms", lat.get("p50"),
             None if lat.get("p50") is None else lat["p50"] <= LATENCY_P50_MS, r.get("live_per_batch")),
            (f"latency p99 <= {LATENCY_P99_MS} ms", lat.get("p99"),
             None if lat.get("p99") is None else lat["p99"] <= LATENCY_P99_MS, r.get("live_per_batch"))]
    return [{"target": t, "value": v, "met": met, **(holder(pb) if met is False else {})} for t, v, met, pb in rows]
