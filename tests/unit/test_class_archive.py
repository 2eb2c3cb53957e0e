"""The class-data-sharing archive is offered to a driver only for the class path and ``java`` it
was written with (kappa.streaming.class_archive)."""

from __future__ import annotations

import json

from kappa.config import load_settings
from kappa.core.jvm import CLASS_ARCHIVE_RECORD, class_archive_options, class_archive_path, class_archive_record


def test_the_archive_is_offered_only_for_its_own_class_path_and_java(tmp_path):
    settings = load_settings(home=tmp_path / "home", jars_dir=tmp_path / "build" / "jars")
    archive = class_archive_path(settings)
    assert archive == tmp_path / "build" / "cds" / "spark-driver.jsa"
    assert class_archive_options(settings, "a.jar:b.jar") == ""  # none written
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"\0")
    assert class_archive_options(settings, "a.jar:b.jar") == ""  # no record of what it was written for
    (archive.parent / CLASS_ARCHIVE_RECORD).write_text(json.dumps(class_archive_record("a.jar:b.jar")))
    assert class_archive_options(settings, "a.jar:b.jar") == f"-XX:SharedArchiveFile={archive}"
    assert class_archive_options(settings, "a.jar:b.jar:guard.jar") == ""  # kappa serve's longer class path
    (archive.parent / CLASS_ARCHIVE_RECORD).write_text(json.dumps({**class_archive_record("a.jar:b.jar"), "java": "/opt/other/java"}))
    assert class_archive_options(settings, "a.jar:b.jar") == ""
    archive.unlink()
    (archive.parent / CLASS_ARCHIVE_RECORD).write_text(json.dumps(class_archive_record("a.jar:b.jar")))
    assert class_archive_options(settings, "a.jar:b.jar") == ""
