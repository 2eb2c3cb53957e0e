"""What analysts use besides the SQL endpoint: Spark SQL over the promoted tables by stable name
(:mod:`~kappa.analytics.sql`, ``kappa sql``) and dbt over the endpoint (:mod:`~kappa.analytics.dbt`,
``kappa dbt``). Readers outside Spark use :mod:`kappa.tables`."""
