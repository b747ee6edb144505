"""Kroxylicious, the Java (Netty) Kafka proxy, as a pass-through virtual cluster in front of the
benchmark's broker: the same clients and broker measure it beside this proxy.

Maven Central serves ``kroxylicious-runtime`` 0.12.0 and nothing newer (0.13-0.21 and every
``kroxylicious-app`` are refused there), so its jars are resolved into the cache like Kafka's and a
ten-line launcher (``bench/java``) starts its ``KafkaProxy``, as the app's main would."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from proxy.dev.apache_kafka import LOOPBACK, free_port
from proxy.dev.kafka_jars import KafkaUnavailable, java_executable, maven_libs

KROXYLICIOUS_VERSION = "0.12.0"
_LAUNCHER = Path(__file__).parent / "java" / "KroxyliciousPassThrough.java"
# One virtual cluster, brokers told apart by port from the bootstrap port up (Kroxylicious's
# portIdentifiesNode gateway), no filters: the pass-through its users start from.
_CONFIG = """virtualClusters:
  - name: bench
    targetCluster:
      bootstrapServers: {upstream}{upstream_tls}
    gateways:
    - name: default
      portIdentifiesNode:
        bootstrapAddress: {host}:{port}{gateway_tls}
"""
_UPSTREAM_TLS = """
      tls:
        trust:
          storeFile: {cafile}
          storeType: PEM"""
_GATEWAY_TLS = """
      tls:
        key:
          privateKeyFile: {keyfile}
          certificateFile: {certfile}"""


def _launcher_classes(libs: Path) -> Path:
    classes = libs.parent / "classes"
    if not (classes / "KroxyliciousPassThrough.class").exists():
        javac = Path(java_executable()).with_name("javac")
        if not javac.exists() and shutil.which("javac") is None:
            raise KafkaUnavailable(f"compiling {_LAUNCHER.name} needs a JDK (javac), and none was found")
        classes.mkdir(exist_ok=True)
        subprocess.run([str(javac) if javac.exists() else "javac", "-cp", f"{libs}/*", "-d", str(classes),
                        str(_LAUNCHER)], check=True, capture_output=True, text=True, timeout=300)
    return classes


class KroxyliciousProcess:
    """``with KroxyliciousProcess(upstream, directory) as kroxylicious:`` clients use ``.bootstrap``; with TLS to
    clients when given a ``certificate`` (its PEM certificate and PKCS#8 key files), and to the cluster when given the
    ``upstream_cafile`` that signed the cluster's."""

    def __init__(self, upstream: str, directory: Path, certificate: tuple[Path, Path] | None = None,
                 upstream_cafile: Path | None = None, name: str = "kroxylicious") -> None:
        self.upstream = upstream
        self.directory = directory
        self.certificate = certificate
        self.upstream_cafile = upstream_cafile
        self.name = name
        """Its files' names in ``directory``."""
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def __enter__(self) -> KroxyliciousProcess:
        libs = maven_libs(f"kroxylicious-{KROXYLICIOUS_VERSION}", f"Kroxylicious {KROXYLICIOUS_VERSION}",
                          (f"io.kroxylicious:kroxylicious-runtime:{KROXYLICIOUS_VERSION}",))
        classes = _launcher_classes(libs)
        config = self.directory / f"{self.name}.yaml"
        certificate = self.certificate
        config.write_text(_CONFIG.format(
            upstream=self.upstream, host=LOOPBACK, port=self.port,
            upstream_tls="" if self.upstream_cafile is None else _UPSTREAM_TLS.format(cafile=self.upstream_cafile),
            gateway_tls="" if certificate is None else _GATEWAY_TLS.format(certfile=certificate[0],
                                                                          keyfile=certificate[1])))
        log = self.directory / f"{self.name}.log"
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [java_executable(), "-Xmx512m", "-cp", f"{classes}:{libs}/*", "KroxyliciousPassThrough", str(config)],
                stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while b"started" not in log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"Kroxylicious did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
