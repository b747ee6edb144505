"""Apache Kafka's jars: ``kafka_2.13`` and ``kafka-tools`` with the log4j binding that matches the
log4j-core Kafka brings, resolved once by Maven from Maven Central into a cache that outlives every
run (``~/.cache/kafka-quota-proxy``, or ``$KAFKA_QUOTA_PROXY_CACHE``), and the Java that runs them."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
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
