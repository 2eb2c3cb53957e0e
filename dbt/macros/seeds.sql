{#-
  Seeds are Delta tables at an explicit location (location_root). dbt-spark reloads a seed by
  dropping the table and creating it again; dropping a table with a location keeps its files, so
  Delta would keep the old rows and the reload would append a second copy. Empty it after the
  create, before dbt inserts the CSV's rows.
-#}
{% macro spark__reset_csv_table(model, full_refresh, old_relation, agate_table) %}
    {% if old_relation %}
        {{ adapter.drop_relation(old_relation) }}
    {% endif %}
    {% set sql = create_csv_table(model, agate_table) %}
    {% do run_query("delete from " ~ this.render()) %}
    {{ return(sql) }}
{% endmacro %}
