"""Where the gate's shadow diff compares a candidate with the promoted version: at one cut, the
Delta versions of the two whose micro-batches covered the same source offsets through every
upstream (:mod:`kappa.streaming.provenance`), so a promoted query that has read further since does
not differ from a correct replay (:func:`kappa.quality.gate.shadow_diff`)."""

from __future__ import annotations

import json

from kappa.config import Settings
from kappa.delta.registry import Registry


def same_cut(settings: Settings, registry: Registry, candidate, promoted) -> dict:
    """Where the shadow diff compares ``candidate`` with ``promoted`` (two
    :class:`kappa.delta.registry.Version` of one asset): :func:`common_cut` of their micro-batches'
    source-offset watermarks (:func:`kappa.streaming.provenance.batch_watermarks`, over each
    table's last 500 commits)."""
    from kappa.streaming.provenance import batch_watermarks

    return common_cut(candidate.name, batch_watermarks(settings, candidate, registry),
                      promoted.name, batch_watermarks(settings, promoted, registry))


def common_cut(candidate: str, mine: list, promoted: str, theirs: list) -> dict:
    """The latest micro-batch of the candidate (``mine``, oldest first, of
    :class:`kappa.streaming.provenance.BatchWatermark`) for which a micro-batch of the promoted
    version (``theirs``) covers the same source offsets through every upstream, so both were
    computed from the same records however far the promoted query has read since; ``candidate``
    and ``promoted`` name the versions in messages. Returns ``{"watermark": topic -> partition ->
    offset, "candidate_snapshot", "promoted_snapshot" (Delta versions), "candidate_batch",
    "promoted_batch", "table_sides"}``, or ``{"why": one line}`` when there is no such pair. Pure."""
    key = lambda wm: json.dumps(wm, sort_keys=True)
    at = {key(b.watermark): b for b in theirs if b.watermark is not None}  # the latest batch per watermark
    for b in reversed(mine):
        if b.watermark is not None and key(b.watermark) in at:
            p = at[key(b.watermark)]
            return {"watermark": b.watermark, "candidate_snapshot": b.snapshot, "promoted_snapshot": p.snapshot,
                    "candidate_batch": b.batch_id, "promoted_batch": p.batch_id,
                    "table_sides": sorted(set(b.table_sides) | set(p.table_sides))}
    for name, batches in ((candidate, mine), (promoted, theirs)):
        if not any(b.watermark for b in batches):
            return {"why": f"{name} has no micro-batch commit that records the source offsets it covers "
                           "through every upstream: no cut to compare at"}
    last = next(b for b in reversed(mine) if b.watermark)
    return {"why": f"no micro-batch of {promoted} covers the source offsets {candidate} batch {last.batch_id} "
                   f"covers ({_offsets_line(last.watermark)}); let both queries reach the same offsets "
                   "(stop ingesting, run each until caught up) and run the gate again"}


def _offsets_line(watermark: dict) -> str:
    """``flights[0:120,1:118]`` for a watermark (topic -> partition -> end offset)."""
    return ", ".join(f"{t}[" + ",".join(f"{p}:{o}" for p, o in sorted(parts.items())) + "]"
                     for t, parts in sorted(watermark.items()))
