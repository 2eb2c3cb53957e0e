"""kappa.services.spark_cluster without starting it: a cluster that is not running reports down
(never raises), and its status still says which master URL it would have; a worker that is not
running cannot be killed."""

from __future__ import annotations

import json

import pytest

from kappa.config import load_settings
from kappa.services import services, spark_cluster


def test_a_cluster_that_never_ran_is_down_and_names_its_master(tmp_path):
    settings = load_settings(home=tmp_path, spark_cluster_port=47001, spark_cluster_webui_port=48001)
    st = spark_cluster.status(settings)
    assert st.up is False and st.workers == [] and st.pids == {}
    assert st.env == {"KAPPA_SPARK_MASTER": "spark://127.0.0.1:47001"} and st.webui == "http://127.0.0.1:48001"
    assert json.loads(st.to_json())["master"] == "spark://127.0.0.1:47001"
    assert st.summary()[:2] == ["at spark://127.0.0.1:47001 (web UI http://127.0.0.1:48001)",
                                "export KAPPA_SPARK_MASTER=spark://127.0.0.1:47001"]
    assert spark_cluster.stop(settings) == {}
    with pytest.raises(spark_cluster.SparkClusterError, match="worker-1 is not running"):
        spark_cluster.kill_worker(settings, "worker-1")


def test_it_is_one_of_the_local_parts_and_its_scala_version_comes_from_pysparks_jars():
    assert "spark" in [s.name for s in services()]
    assert spark_cluster._scala_version() == "2.13"
