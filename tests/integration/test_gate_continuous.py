"""A version built by `kappa run --continuous` (no caught_up event) is gated on what it really
read: 5 % bad records fail quarantine_rate and block its promotion."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kappa.delta.registry import Registry
from kappa.ingest.events import Events
from kappa.ingest.nycflights13 import load_events, publish
from kappa.kafka.topics import offsets
from kappa.lifecycle.promotion import GateFailedError, promote
from kappa.quality.gate import run_gate
from kappa.streaming.checkpoint import read_checkpoint

from ..conftest import REPO
from .helpers import renamed
from ..kappa_cli import clean_env

pytestmark = pytest.mark.integration

KAPPA = str(Path(sys.executable).parent / "kappa")
GOOD = 1_900
BAD = 100  # 5 % of what is sent


def test_a_continuous_version_with_5_percent_bad_records_fails_quarantine_rate_and_is_not_promoted(make_env, spark):
    settings, suffix = make_env()
    flights = next(e for e in renamed(load_events(limit=GOOD), suffix) if e.topic.startswith("flights"))
    bad = [b'{"event_id": "bad-%d", ' % i for i in range(BAD)]
    step = GOOD // BAD
    keys, values, ts = [], [], []
    for i, (k, v, t) in enumerate(zip(flights.keys, flights.values, flights.timestamps_ms.tolist())):
        keys.append(k), values.append(v), ts.append(t)
        if i % step == 0 and i // step < BAD:
            keys.append(b"BAD"), values.append(bad[i // step]), ts.append(t)
    import numpy as np

    publish(settings, [Events(flights.topic, keys, values, np.array(ts, dtype=np.int64), [])])
    end = sum(p.end for p in offsets(settings, [flights.topic]))
    assert end == GOOD + BAD

    env = clean_env()
    env.update({"KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(settings.home),
                "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
                "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
                "KAPPA_SPARK_DRIVER_MEMORY": "1g", "KAPPA_SPARK_MASTER": "local[2]", "COLUMNS": "200"})
    run = subprocess.Popen([KAPPA, "run", "flights", "--continuous"], env=env, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while True:  # until the checkpoint has committed the whole log
            assert run.poll() is None, run.communicate()[0][-3000:]
            v = Registry(settings).latest("flights")
            if v is not None:
                committed = read_checkpoint(v.checkpoint_path).offsets.get(flights.topic, {})
                if sum(committed.values()) >= end:
                    break
            assert time.monotonic() < deadline, "the continuous run did not consume the log"
            time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
    version = Registry(settings).latest("flights")
    assert version.last("caught_up") is None  # continuous: the old check had nothing to read

    report = run_gate(settings, "flights", version.version, spark=spark)
    check = next(c for c in report.checks if c.name == "quarantine_rate")
    assert check.evaluated and not check.passed
    assert check.details == {"quarantined": BAD, "read": GOOD + BAD}
    assert not report.passed
    with pytest.raises(GateFailedError, match="quarantine_rate"):
        promote(settings, "flights", version.version, spark=spark)
    assert Registry(settings).promoted("flights") is None
