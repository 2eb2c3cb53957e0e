"""The local driver maps the class-data-sharing archive `make install` wrote
(kappa.streaming.class_archive): its classes are not parsed from the jars again."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappa.core.jvm import class_archive_path

pytestmark = pytest.mark.integration


def test_the_local_driver_maps_the_archive_make_install_wrote(spark, broker_settings):
    archive = class_archive_path(broker_settings)
    assert archive.is_file(), f"{archive} is missing: make install writes it"
    pid = spark.sparkContext._gateway.proc.pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(archive) in maps, f"the driver (pid {pid}) does not map {archive}"
