{#- Generic tests the project uses, written here rather than pulling a package at run time. -#}

{% test in_range(model, column_name, min_value=none, max_value=none) %}
-- Rows whose value lies outside [min_value, max_value] (nulls pass: not_null tests those).
select {{ column_name }}
from {{ model }}
where {{ column_name }} is not null
  and (
    {% if min_value is not none %} {{ column_name }} < {{ min_value }} {% else %} false {% endif %}
    or {% if max_value is not none %} {{ column_name }} > {{ max_value }} {% else %} false {% endif %}
  )
{% endtest %}

{% test unique_combination_of_columns(model, columns) %}
-- Key combinations that occur more than once.
select {{ columns | join(', ') }}, count(*) as occurrences
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
