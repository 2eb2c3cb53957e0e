-- Departure performance per airline and local scheduled departure date.
with flights as (
    select * from {{ ref('stg_kappa__flights') }}
),

airlines as (
    select * from {{ ref('stg_nycflights13__airlines') }}
),

daily as (
    select
        carrier,
        flight_date,
        count(*) as flights,
        count_if(is_cancelled) as cancelled,
        count_if(not is_cancelled) as departed,
        count_if(not is_cancelled and dep_delay <= {{ var('on_time_max_delay_min') }}) as on_time_departures,
        avg(case when not is_cancelled then dep_delay end) as avg_dep_delay_min
    from flights
    group by carrier, flight_date
)

select
    daily.carrier,
    airlines.name,
    daily.flight_date,
    daily.flights,
    daily.cancelled,
    daily.departed,
    daily.on_time_departures,
    -- null, not an error, on a day when every flight was cancelled
    daily.on_time_departures / nullif(daily.departed, 0) as on_time_rate,
    daily.avg_dep_delay_min
from daily
left join airlines on daily.carrier = airlines.carrier
