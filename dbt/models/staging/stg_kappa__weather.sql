-- One row per origin airport and observation hour (local date from year/month/day).
with source as (
    select * from {{ source('kappa', 'weather') }}
)

select
    event_id as observation_id,
    origin,
    make_date(year, month, day) as observation_date,
    hour,
    temp as temp_f,
    wind_speed as wind_speed_mph,
    precip as precip_in,
    visib as visibility_mi
from source
