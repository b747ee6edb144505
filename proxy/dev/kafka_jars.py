"""Apache Kafka's jars: ``kafka_2.13`` and ``kafka-tools`` with the log4j binding that matches the
log4j-core Kafka brings, resolved once by Maven from Maven Central into a cache that outlives every
run (``~/.cache/kafka-quota-proxy``, or ``$KAFKA_QUOTA_PROXY_CACHE``), and the Java that runs them."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.25.4"
"""The log4j-core that kafka_2.13 brings; its SLF4J binding must be the same version."""
_MIN_JAVA = 17
_FIX = ("install Java 17+ and Maven (Debian/Ubuntu: apt install openjdk-17-jre-headless maven), "
        "or run against a cluster of your own: KAFKA_BOOTSTRAP=host:port")
_KAFKA_ARTIFACTS = (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
                    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}")
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafka-quota-proxy</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>"

class KafkaUnavailable(RuntimeError):
    """Apache Kafka cannot be run here (no Java 17+, no Maven, or its jars could not be resolved)."""



def cache_directory() -> Path:
    configured = os.environ.get("KAFKA_QUOTA_PROXY_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-quota-proxy"


@functools.cache
def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` or the ``java`` on PATH, checked to be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaUnavailable(f"Apache Kafka {KAFKA_VERSION} needs Java, and none was found: {_FIX}")
    version = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    found = re.search(r'version "(\d+)', version)
    if not found or int(found.group(1)) < _MIN_JAVA:
        raise KafkaUnavailable(f"Apache Kafka {KAFKA_VERSION} needs Java {_MIN_JAVA}+, {java} is "
                               f"{version.splitlines()[0] if version else 'unknown'}: {_FIX}")
    return java


class ClassSharing:
    """JVM options that start a Kafka tool from an archive of the classes such a tool loads (the JDK's class-data
    sharing, kept in the cache beside the jars, one per JDK): about half a tool's start-up. Until the archive is
    there, a run writes it at its exit, and ``done`` keeps it if the run succeeded (two such runs at once: the last
    kept wins, whole). The JVM starts without an archive it cannot map, and says nothing of it."""

    def __init__(self, libs: Path) -> None:
        self._archive = self._archive_of(libs)
        self._written: Path | None = None
        if self._archive.exists():
            self.options = self.mapped(libs)
        else:
            self._written = self._archive.with_name(f"{self._archive.name}.{uuid.uuid4().hex}.partial")
            self.options = ["-Xlog:cds*=off", f"-XX:ArchiveClassesAtExit={self._written}"]

    @classmethod
    def mapped(cls, libs: Path) -> list[str]:
        """The options of a run that maps the archive when it is there and never writes it (``kafka-storage format``:
        the archive is best made by an admin tool, as most runs are)."""
        archive = cls._archive_of(libs)
        return ["-Xlog:cds*=off", f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []

    @staticmethod
    def _archive_of(libs: Path) -> Path:
        java = Path(os.path.realpath(java_executable()))
        jdk = hashlib.sha256(f"{java}:{java.stat().st_mtime_ns}".encode()).hexdigest()[:12]
        return libs.parent / f"tool-classes-{jdk}.jsa"

    def done(self, succeeded: bool) -> None:
        if self._written is not None and self._written.exists():
            if succeeded:
                os.replace(self._written, self._archive)
            else:
                self._written.unlink()


def kafka_libs() -> Path:
    """The directory of Kafka's jars, resolved from Maven Central on first use."""
    return maven_libs(f"apache-kafka-{KAFKA_VERSION}", f"Apache Kafka {KAFKA_VERSION}", _KAFKA_ARTIFACTS, _check_log4j)


def _check_log4j(libs: Path) -> None:
    cores = sorted(path.name for path in libs.glob("log4j-core-*.jar"))
    if cores != [f"log4j-core-{LOG4J_VERSION}.jar"]:
        raise KafkaUnavailable(f"Apache Kafka {KAFKA_VERSION} brings {cores}, but its SLF4J binding is "
                               f"log4j-slf4j-impl {LOG4J_VERSION}: set LOG4J_VERSION to match")


def maven_libs(name: str, what: str, artifacts: tuple[str, ...], check: Callable[[Path], None] | None = None
               ) -> Path:
    """``<cache>/<name>/lib``: the runtime jars of ``artifacts`` (``group:artifact:version``) and what they
    depend on, resolved by Maven on first use (a lock keeps two processes from resolving at once; a
    half-resolved directory is never used; ``check`` may refuse what was resolved)."""
    root = cache_directory() / name
    libs = root / "lib"
    dependencies = "\n".join(_DEPENDENCY.format(*artifact.split(":")) for artifact in artifacts)
    return made_once(root, libs, lambda: _resolve(root, libs, what, _POM.format(name=name, dependencies=dependencies),
                                                  check))


def made_once(root: Path, product: Path, make: Callable[[], None]) -> Path:
    """``product`` (in ``root``, a directory of the cache), made by ``make`` the first time it is asked for: a lock
    keeps two processes from making it at once, and ``make`` puts it in place last, so a half-made one is never
    used."""
    if product.exists():
        return product
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not product.exists():
            make()
    return product


def _resolve(root: Path, libs: Path, what: str, pom: str, check: Callable[[Path], None] | None) -> None:
    maven = shutil.which("mvn")
    if maven is None:
        raise KafkaUnavailable(f"resolving {what} from Maven Central needs Maven (mvn), "
                               f"and none was found: {_FIX}")
    java_executable()
    print(f"resolving {what} from Maven Central into {libs} (once)", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        (Path(scratch) / "pom.xml").write_text(pom)
        done = subprocess.run([maven, "--batch-mode", "--quiet", "dependency:copy-dependencies",
                               "-DincludeScope=runtime", "-DoutputDirectory=lib"],
                              cwd=scratch, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise KafkaUnavailable(f"Maven could not resolve {what} "
                                   f"(exit {done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
        resolved = Path(scratch) / "lib"
        if check is not None:
            check(resolved)
        resolved.rename(libs)
