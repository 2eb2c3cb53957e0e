-- Departures and weather per origin airport and local date: how the day's weather went with its delays.
with flights as (
    select * from {{ ref('stg_kappa__flights') }}
),

weather as (
    select * from {{ ref('stg_kappa__weather') }}
),

departures as (
    select
        origin,
        flight_date,
        count(*) as flights,
        count_if(is_cancelled) as cancelled,
        count_if(not is_cancelled) as departed,
        avg(case when not is_cancelled then dep_delay end) as avg_dep_delay_min
    from flights
    group by origin, flight_date
),

daily_weather as (
    select
        origin,
        observation_date,
        count(*) as weather_observations,
        avg(temp_f) as avg_temp_f,
        max(wind_speed_mph) as max_wind_speed_mph,
        sum(precip_in) as total_precip_in,
        min(visibility_mi) as min_visibility_mi
    from weather
    group by origin, observation_date
)

select
    departures.origin,
    departures.flight_date,
    departures.flights,
    departures.cancelled,
    departures.departed,
    departures.cancelled / departures.flights as cancellation_rate,
    departures.avg_dep_delay_min,
    coalesce(daily_weather.weather_observations, 0) as weather_observations,
    daily_weather.avg_temp_f,
    daily_weather.max_wind_speed_mph,
    daily_weather.total_precip_in,
    daily_weather.min_visibility_mi
from departures
left join daily_weather
    on departures.origin = daily_weather.origin
    and departures.flight_date = daily_weather.observation_date
