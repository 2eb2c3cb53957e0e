"""Nexmark on Kappa: each query declared in ``assets/nexmark/`` (run as ``kappa run`` runs assets,
into Delta) equals DuckDB's answer to the same query over the same generated events.

4,000 events from the pinned generator (0.4 s of event time at its 10,000 events/s), so every
interval of the declarations is scaled down 100 times (10-second windows become 100 ms), or no
window would close. A windowed query is compared on the windows its final watermark has closed
(the rows Spark's append mode emits), read from the run's own result."""

from __future__ import annotations

import re
from decimal import Decimal

import duckdb
import pandas as pd

from kappa.harness.nexmark import TOPICS, generate, publish
from kappa.runners import run_until_caught_up

from .helpers import table
from ..conftest import REPO

EVENTS = 4_000
SCALE = 100  # 10 seconds -> 100 milliseconds

_SECONDS = re.compile(r"\b(\d+) seconds?\b")


def _scaled(value):
    """Every 'N seconds' in a declaration (windows, watermarks, time ranges, SQL) as N*1000/SCALE ms."""
    if isinstance(value, str):
        return _SECONDS.sub(lambda m: f"{int(m.group(1)) * 1000 // SCALE} milliseconds", value)
    if isinstance(value, dict):
        return {k: _scaled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scaled(v) for v in value]
    return value


def _scale(_name: str, doc: dict) -> None:
    doc.update(_scaled(doc))


def _ms(s: pd.Series) -> pd.Series:
    """Timestamps (any unit, UTC) as epoch milliseconds."""
    return (pd.to_datetime(s, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


def _rows(df: pd.DataFrame, cols: list[str], times: tuple[str, ...] = ()) -> list[tuple]:
    df = df[cols].copy()
    for c in times:
        df[c] = _ms(df[c])
    return sorted(map(tuple, df.astype(object).itertuples(index=False, name=None)))


def _wm_ms(result) -> int:
    assert result.watermark, f"{result.asset} reported no watermark"
    return int(_ms(pd.Series([result.watermark])).iloc[0])


def test_each_query_equals_duckdb_over_the_same_events(make_env, spark):
    settings, suffix = make_env(edit=_scale, name="nexmark", source=REPO / "assets" / "nexmark")
    events = generate(settings, EVENTS)
    published = publish(settings, events, {t: f"{t}_{suffix}" for t in TOPICS.values()})
    assert sum(published.values()) == EVENTS
    results = {r.asset: r for r in run_until_caught_up(settings, spark=spark)}

    db = duckdb.connect()
    for topic in TOPICS.values():
        df = pd.DataFrame(events.records[topic])
        for c in ("date_time", "expires"):
            if c in df:
                df[c] = _ms(df[c])  # epoch ms, as the generator printed them
        db.register(topic.removeprefix("nexmark_"), df)

    def q(sql: str) -> list[tuple]:
        return sorted(db.execute(sql).fetchall())

    got = {name: table(settings, name) for name in ("q0", "q1", "q2", "q3_join", "q3", "q5", "q7", "q8")}

    # q0: pass-through.
    assert _rows(got["q0"], ["event_id", "auction", "bidder", "price", "date_time", "extra"], ("date_time",)) == \
        q("SELECT event_id, auction, bidder, price, date_time, extra FROM bid")
    # q1: 0.908 * price, an exact decimal on both sides.
    expected = q("SELECT event_id, auction, 0.908 * price FROM bid")
    assert _rows(got["q1"], ["event_id", "auction", "price"]) == expected
    assert isinstance(expected[0][2], Decimal)
    # q2: every 123rd auction.
    expected = q("SELECT event_id, auction, price FROM bid WHERE auction % 123 = 0")
    assert expected and _rows(got["q2"], ["event_id", "auction", "price"]) == expected
    # q3: the unbounded join, then the selection.
    expected = q("SELECT a.event_id, p.name, p.city, p.state, a.id, a.category FROM auction a "
                 "JOIN person p ON a.seller = p.id")
    assert expected and _rows(got["q3_join"], ["event_id", "name", "city", "state", "id", "category"]) == expected
    assert _rows(got["q3"], ["event_id", "name", "city", "state", "id"]) == \
        q("SELECT a.event_id, p.name, p.city, p.state, a.id FROM auction a JOIN person p ON a.seller = p.id "
          "WHERE a.category = 10 AND p.state IN ('or', 'id', 'ca')")

    # q5: hopping windows (size 100 ms, slide 20 ms), the auctions with the most bids in each window;
    # the windows q5_counts' watermark closed and whose maximum q5_max's watermark closed.
    size, slide = 10_000 // SCALE, 2_000 // SCALE
    counts_wm, max_wm = _wm_ms(results["q5_counts"]), _wm_ms(results["q5_max"])
    expected = q(f"""
        WITH w AS (SELECT auction, s AS ws FROM bid,
                   unnest(range((date_time // {slide}) * {slide} - {size - slide}, (date_time // {slide}) * {slide} + 1,
                                {slide})) AS t(s)),
             c AS (SELECT auction, ws, count(*) AS num FROM w GROUP BY ALL HAVING ws + {size} <= {counts_wm}),
             m AS (SELECT ws, max(num) AS num FROM c GROUP BY ws HAVING ws + {slide} <= {max_wm})
        SELECT c.auction, c.ws, c.num FROM c JOIN m USING (ws, num)""")
    assert len({ws for _a, ws, _n in expected}) >= 5, "too few closed q5 windows to compare"
    assert _rows(got["q5"], ["auction", "window_start", "num"], ("window_start",)) == expected

    # q7: the highest bids of each tumbling 100 ms window q7_max's watermark closed.
    max_wm = _wm_ms(results["q7_max"])
    expected = q(f"""
        WITH b AS (SELECT *, (date_time // {size}) * {size} AS ws FROM bid)
        SELECT b.event_id, b.auction, b.price, b.ws FROM b
        JOIN (SELECT ws, max(price) AS price FROM b GROUP BY ws HAVING ws + {size} <= {max_wm}) m USING (ws, price)""")
    assert len(expected) >= 2, "too few closed q7 windows to compare"
    assert _rows(got["q7"], ["event_id", "auction", "price", "window_start"], ("window_start",)) == expected

    # q8: persons who created an auction in the 100 ms window they registered in (one row per such
    # auction; Nexmark's rows are the distinct seller, name, window).
    expected = q(f"""
        SELECT a.event_id, p.id, p.name, (p.date_time // {size}) * {size} FROM auction a JOIN person p
        ON a.seller = p.id AND a.date_time // {size} = p.date_time // {size}""")
    assert expected and _rows(got["q8"], ["event_id", "seller", "name", "window_start"], ("window_start",)) == expected
