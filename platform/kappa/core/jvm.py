"""JVM dependencies resolved by Maven (``jvm/*/pom.xml``) into ``build/jars/<set>``.

Nothing is fetched at run time: Spark receives its extra jars through ``spark.jars`` and the local
broker runs from a classpath of its jar folder. ``make install`` runs the Maven step.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


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


def spark_jars(settings: Settings) -> list[Path]:
    """The jars to hand to Spark: the Maven-resolved set minus every artifact pyspark already ships
    (same artifactId), so pyspark's own versions win and nothing is loaded twice."""
    import pyspark

    shipped = {artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j for j in jar_dir(settings, "spark").glob("*.jar") if artifact_name(j) not in shipped)
