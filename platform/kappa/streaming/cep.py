"""Complex event processing: a declarative event pattern matched over one key's events, in order.

This module is the pure state machine, free of Spark: the ``pattern`` transform's stateful
processor (:mod:`kappa.streaming.kinds.pattern`) keeps its state in Spark's state store and calls it. It
is unit-tested on hand-made sequences.

A **pattern** is a sequence of steps, each a predicate with a count: ``delayed × 3`` is three
events in a row that each satisfy ``delayed``; ``delayed × 1, cancelled × 1`` is a delayed event
followed by a cancelled one. ``within`` bounds the time from a match's first event to its last.

Semantics (per key, over events in order — see :func:`order_key`):

* **strict contiguity** (Flink CEP's "strict", SASE's "strict contiguity"): a match is a run of
  consecutive events of the key. An event that cannot extend the partial match breaks it; the
  matcher then keeps the longest suffix of the partial match plus that event that is still a valid
  start of the pattern (so ``delayed, delayed, on-time`` leaves nothing, and when the first of
  three delayed events is more than ``within`` before the third, the earliest is dropped and
  matching continues from the second).
* **relaxed contiguity** (Flink's "relaxed", SASE's "skip till next match"): events that do not
  satisfy the next step are skipped. Among the partial matches alive, the one that starts earliest
  wins; each step takes the first event that satisfies it.
* **after a match**, matching restarts after the match's last event (Flink's
  ``AfterMatchSkipStrategy.skipPastLastEvent``): matches never share events.

Events must be fed in order; the caller buffers out-of-order arrivals until the watermark passes
them (:func:`release`) and sets aside, as late, an event that arrives after its key was released
past it.

Example::

    >>> p = Pattern(positions=(0, 0, 0), within_us=24 * 3600 * 10**6, contiguity="strict")
    >>> m = Matcher(p)
    >>> hour = 3600 * 10**6
    >>> [m.feed(Event(t * hour, (), f"e{t}", (True,), ())) for t in (0, 1, 2)][-1].event_ids
    ['e0', 'e1', 'e2']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

Contiguity = Literal["strict", "relaxed"]


@dataclass(frozen=True)
class Event:
    """One event of a key, as the matcher sees it.

    ``time_us``: event time in microseconds since the epoch (UTC); ``order``: the tie-breaking
    values after the time (e.g. ``(carrier, flight)``); ``steps``: whether the event satisfies each
    step's predicate, by step index; ``values``: the values the output collects (e.g. ``dep_delay``).
    """

    time_us: int
    order: tuple
    event_id: str
    steps: tuple[bool, ...]
    values: tuple

    def to_json(self) -> str:
        """The event as one JSON array, ``[time_us, order, event_id, steps, values]``: the form the
        pattern processor keeps in Spark's state store (:meth:`Matcher.state`)."""
        return json.dumps([self.time_us, list(self.order), self.event_id, list(self.steps), list(self.values)])

    @classmethod
    def from_json(cls, text: str) -> "Event":
        """The inverse of :meth:`to_json` (lists back to tuples, steps to bools). Raises
        ``ValueError`` (``json.JSONDecodeError`` among them) or ``TypeError`` for text that is not
        such an array."""
        t, order, eid, steps, values = json.loads(text)
        return cls(int(t), tuple(order), eid, tuple(bool(s) for s in steps), tuple(values))


def order_key(event: Event) -> tuple:
    """Sort key: event time, then the tie-breakers (nulls first), then the event id, so the order is
    total and the same on every replay."""
    return (event.time_us, tuple((v is not None, v) for v in event.order), event.event_id)


@dataclass(frozen=True)
class Match:
    """One complete match: the events that satisfied the pattern's positions, in order (as many as
    :attr:`Pattern.positions`, never empty)."""

    events: tuple[Event, ...]

    @property
    def event_ids(self) -> list[str]:
        """The ids of the matched events, in match order (the ``event_ids`` column of the output)."""
        return [e.event_id for e in self.events]

    @property
    def first_us(self) -> int:
        """Event time of the match's first event, microseconds since the epoch (UTC)."""
        return self.events[0].time_us

    @property
    def last_us(self) -> int:
        """Event time of the match's last event, microseconds since the epoch (UTC)."""
        return self.events[-1].time_us

    def collected(self, i: int) -> list:
        """The ``i``-th collected value of every event of the match, in order."""
        return [e.values[i] for e in self.events]


@dataclass(frozen=True)
class Pattern:
    """``positions``: the step index each event of a match must satisfy, in order (a step with
    count 3 occupies three positions); ``within_us``: the largest allowed time from a match's first
    event to its last (None: unbounded)."""

    positions: tuple[int, ...]
    within_us: int | None
    contiguity: Contiguity = "strict"

    @classmethod
    def from_counts(cls, counts: Sequence[int], within_us: int | None, contiguity: Contiguity = "strict") -> "Pattern":
        """The pattern of steps with these counts, in order: ``(3,)`` is ``positions=(0, 0, 0)``,
        ``(1, 2)`` is ``(0, 1, 1)``. ``within_us`` in microseconds (None: unbounded)."""
        return cls(tuple(i for i, c in enumerate(counts) for _ in range(c)), within_us, contiguity)

    def fits(self, first: Event, last: Event) -> bool:
        """Whether ``first`` and ``last`` are close enough to be in one match: at most
        ``within_us`` microseconds apart (inclusive), or no bound at all."""
        return self.within_us is None or last.time_us - first.time_us <= self.within_us


class Matcher:
    """The state machine of one key. ``feed`` events in order; it returns the match an event
    completes, or None. Its whole state is :attr:`buffer` (the partial match, or with relaxed
    contiguity the events that may still start or extend one): :meth:`state` serialises it and
    :meth:`restore` rebuilds an equal matcher, so a query restarted from its checkpoint continues
    a match half-way through."""

    def __init__(self, pattern: Pattern, buffer: Iterable[Event] = ()):
        self.pattern = pattern
        self.buffer: list[Event] = list(buffer)

    def state(self) -> list[str]:
        """The buffer as one JSON string per event (:meth:`Event.to_json`), oldest first: what the
        processor writes to its state store; ``[]`` when no partial match is alive."""
        return [e.to_json() for e in self.buffer]

    @classmethod
    def restore(cls, pattern: Pattern, state: Iterable[str]) -> "Matcher":
        """A matcher of ``pattern`` whose buffer is ``state`` (the output of :meth:`state`), so it
        continues exactly where the saved one stopped."""
        return cls(pattern, [Event.from_json(s) for s in state])

    def feed(self, event: Event) -> Match | None:
        """Advance the state machine by the key's next event (events in :func:`order_key` order;
        the matcher does not check it). Returns the match ``event`` completes, after which the
        buffer is empty (matches never share events), or None."""
        if self.pattern.contiguity == "strict":
            return self._strict(event)
        return self._relaxed(event)

    def _valid_prefix(self, events: Sequence[Event]) -> bool:
        p = self.pattern
        return (len(events) <= len(p.positions)
                and all(e.steps[p.positions[k]] for k, e in enumerate(events))
                and p.fits(events[0], events[-1]))

    def _strict(self, event: Event) -> Match | None:
        # The buffer was the longest valid suffix before this event, and a sequence that is not a
        # valid prefix never becomes one by growing, so trying the starts from the buffer's first
        # event onwards finds the earliest start still alive.
        run = [*self.buffer, event]
        while run and not self._valid_prefix(run):
            run.pop(0)
        if len(run) == len(self.pattern.positions):
            self.buffer = []
            return Match(tuple(run))
        self.buffer = run
        return None

    def _relaxed(self, event: Event) -> Match | None:
        p = self.pattern
        if not any(event.steps):
            return None  # satisfies no step: skipped, and it cannot break a relaxed match
        events = [*self.buffer, event]
        if p.within_us is not None:
            # An event more than `within` before this one can be in no match ending here or later.
            events = [e for e in events if event.time_us - e.time_us <= p.within_us]
        for i, start in enumerate(events):
            if not start.steps[p.positions[0]]:
                continue
            taken = [start]
            for e in events[i + 1:]:
                if len(taken) == len(p.positions):
                    break
                if e.steps[p.positions[len(taken)]]:
                    taken.append(e)
            # A match that completed before this event was already returned then.
            if len(taken) == len(p.positions) and taken[-1] is event and p.fits(taken[0], event):
                self.buffer = []
                return Match(tuple(taken))
        self.buffer = events
        return None


def release(pending: Iterable[Event], watermark_us: int) -> tuple[list[Event], list[Event]]:
    """Split buffered events into those at or before the watermark, in order (ready to feed), and
    the rest (kept). Once a key is released up to ``t``, the caller sets aside any later arrival at
    or before ``t`` as late (:mod:`kappa.streaming.kinds.pattern`), so the events fed are final and their
    order is the true order."""
    ready, kept = [], []
    for e in pending:
        (ready if e.time_us <= watermark_us else kept).append(e)
    return sorted(ready, key=order_key), kept


def match_all(pattern: Pattern, events: Iterable[Event]) -> list[Match]:
    """Every match of ``events`` (one key), fed in order: the batch form of :class:`Matcher`."""
    m = Matcher(pattern)
    return [x for x in (m.feed(e) for e in sorted(events, key=order_key)) if x is not None]
