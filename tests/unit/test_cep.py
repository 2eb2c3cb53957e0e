"""The CEP matcher's state transitions on small hand-made sequences (kappa.streaming.cep)."""

from __future__ import annotations

import json

from kappa.streaming.cep import Event, Matcher, Pattern, match_all, order_key, release

H = 3600 * 10**6  # one hour in microseconds
THREE_DELAYED = Pattern.from_counts([3], within_us=24 * H, contiguity="strict")


def dep(hours: float, delay: float, eid: str | None = None, carrier: str = "AA", flight: int = 1) -> Event:
    """A departure of one tailnum: step 0 is ``dep_delay > 60``."""
    return Event(int(hours * H), (carrier, flight), eid or f"e{hours:g}", (delay > 60,), (delay,))


def ids(matches) -> list[list[str]]:
    return [m.event_ids for m in matches]


def test_three_consecutive_delays_match_and_matching_restarts_after_the_third():
    events = [dep(h, 90) for h in range(7)]
    assert ids(match_all(THREE_DELAYED, events)) == [["e0", "e1", "e2"], ["e3", "e4", "e5"]]


def test_a_departure_at_or_under_60_minutes_breaks_the_run():
    events = [dep(0, 90), dep(1, 90), dep(2, 60), dep(3, 61), dep(4, 70), dep(5, 200)]
    (m,) = match_all(THREE_DELAYED, events)
    assert m.event_ids == ["e3", "e4", "e5"] and m.collected(0) == [61, 70, 200]


def test_first_more_than_24_hours_before_third_is_dropped_and_matching_continues():
    # e0 -> e25 is 25 h: e0 is dropped; e20, e25, e30 is 10 h: a match.
    events = [dep(0, 90), dep(20, 90), dep(25, 90), dep(30, 90)]
    assert ids(match_all(THREE_DELAYED, events)) == [["e20", "e25", "e30"]]
    # Exactly 24 h from first to third is within.
    assert ids(match_all(THREE_DELAYED, [dep(0, 90), dep(12, 90), dep(24, 90)])) == [["e0", "e12", "e24"]]


def test_ties_at_the_same_time_are_ordered_by_carrier_then_flight():
    b = dep(1, 90, "b", carrier="B6", flight=5)
    a2 = dep(1, 30, "a2", carrier="AA", flight=9)  # on time: breaks the run
    a1 = dep(1, 90, "a1", carrier="AA", flight=2)
    c = dep(2, 90, "c")
    d = dep(3, 90, "d")
    assert [e.event_id for e in sorted([b, a2, a1], key=order_key)] == ["a1", "a2", "b"]
    # Order a1, a2 (breaks), b, c, d: only b, c, d match, whatever the arrival order.
    for arrival in ([b, a2, a1, c, d], [d, c, a1, b, a2]):
        assert ids(match_all(THREE_DELAYED, arrival)) == [["b", "c", "d"]]


def test_state_restored_between_two_events_of_a_match_gives_the_same_matches():
    events = [dep(0, 90), dep(1, 10), dep(2, 90), dep(3, 90), dep(4, 90), dep(5, 90), dep(6, 95)]
    straight = ids(match_all(THREE_DELAYED, events))
    for cut in range(1, len(events)):
        m, out = Matcher(THREE_DELAYED), []
        for e in events[:cut]:
            out.append(m.feed(e))
        saved = json.loads(json.dumps(m.state()))  # what the state store holds, through bytes
        restored = Matcher.restore(THREE_DELAYED, saved)
        assert restored.buffer == m.buffer
        out += [restored.feed(e) for e in events[cut:]]
        assert ids([x for x in out if x]) == straight == [["e2", "e3", "e4"]]
    # Mid-match: after e2 and e3 the state is exactly the two-event partial match.
    m = Matcher(THREE_DELAYED)
    for e in events[:4]:
        m.feed(e)
    assert [e.event_id for e in m.buffer] == ["e2", "e3"]


def test_release_waits_for_the_watermark_and_returns_ready_events_in_order():
    pending = [dep(3, 90), dep(1, 90), dep(2, 90, carrier="UA"), dep(2, 90, "x", carrier="AA")]
    ready, kept = release(pending, watermark_us=2 * H)
    assert [e.event_id for e in ready] == ["e1", "x", "e2"] and [e.event_id for e in kept] == ["e3"]


def relaxed_events():
    """Step 0: delay over 120 minutes; step 1: cancelled (no departure time)."""
    def ev(h, eid, delayed=False, cancelled=False):
        return Event(int(h * H), (), eid, (delayed, cancelled), ())
    return ev


def test_relaxed_contiguity_skips_unrelated_events_and_respects_within():
    ev = relaxed_events()
    p = Pattern.from_counts([1, 1], within_us=12 * H, contiguity="relaxed")
    events = [ev(0, "d0", delayed=True), ev(1, "ok1"), ev(5, "c5", cancelled=True),  # match d0, c5
              ev(6, "d6", delayed=True), ev(7, "d7", delayed=True), ev(19, "c19", cancelled=True),  # d7 -> c19: 12 h
              ev(20, "d20", delayed=True), ev(33, "c33", cancelled=True)]  # 13 h: no match
    assert ids(match_all(p, events)) == [["d0", "c5"], ["d7", "c19"]]


def test_strict_contiguity_of_a_two_step_pattern():
    ev = relaxed_events()
    p = Pattern.from_counts([1, 1], within_us=12 * H, contiguity="strict")
    events = [ev(0, "d0", delayed=True), ev(1, "ok1"), ev(2, "c2", cancelled=True),
              ev(3, "d3", delayed=True), ev(4, "c4", cancelled=True)]
    assert ids(match_all(p, events)) == [["d3", "c4"]]


def test_event_round_trips_through_json():
    e = Event(123, ("AA", 7), "id", (True, False), (61.0, None))
    assert Event.from_json(e.to_json()) == e
