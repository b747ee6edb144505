"""Toxiproxy (Shopify's TCP fault injector) for the integration tests and the soak: its server built once from its
Go module into the cache that outlives every run (beside Kafka's jars, ``kafka_jars.cache_directory``), run as a
child process on a free loopback port and driven through its HTTP API.

A route (Toxiproxy's "proxy") listens on one address and forwards to another; toxics disturb what passes, in one
direction (``upstream``: towards the address forwarded to) or the other: latency with jitter, a bandwidth limit,
``slicer`` (bytes cut into small TCP segments), ``reset_peer``, ``timeout`` (a black hole), ``limit_data``; and a
route can be disabled (a partition: its listener closed, its connections cut).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from proxy.dev.apache_kafka import LOOPBACK, KafkaCluster, free_port
from proxy.dev.kafka_jars import cache_directory, made_once

TOXIPROXY_VERSION = "2.5.0"
_MODULE = f"github.com/Shopify/toxiproxy/v2/cmd/server@v{TOXIPROXY_VERSION}"
_FIX = "install Go (Debian/Ubuntu: apt install golang; or https://go.dev/dl/), which fetches Toxiproxy's module"


class ToxiproxyUnavailable(RuntimeError):
    """Toxiproxy cannot be run here (no Go to build it, or the build failed)."""


def toxiproxy_server() -> Path:
    """Toxiproxy's server, built from its Go module on first use (a lock keeps two processes from building at once;
    a half-built binary is never used)."""
    root = cache_directory() / f"toxiproxy-{TOXIPROXY_VERSION}"
    server = root / "bin" / "server"
    return made_once(root, server, lambda: _build(root, server))


def _build(root: Path, server: Path) -> None:
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyUnavailable(f"the network-fault tests build Toxiproxy {TOXIPROXY_VERSION} with Go, and no "
                                   f"`go` was found: {_FIX}")
    print(f"building Toxiproxy {TOXIPROXY_VERSION} with Go into {server} (once)", file=sys.stderr)
    building = root / "building"
    shutil.rmtree(building, ignore_errors=True)
    done = subprocess.run([go, "install", _MODULE], env={**os.environ, "GOBIN": str(building)},
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise ToxiproxyUnavailable(f"`go install {_MODULE}` failed (exit {done.returncode}):\n"
                                   f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    server.parent.mkdir(exist_ok=True)
    (building / "server").rename(server)
    shutil.rmtree(building, ignore_errors=True)


Address = tuple[str, int]

CLIENT_SIDE = "127.0.0.2"
"""Where a proxy advertises its listeners (``--advertised-host``) when its clients reach it through Toxiproxy: every
listener's port is forwarded from this loopback address to the proxy's own (``route_listeners``)."""
BROKER_SIDE = "127.0.0.3"
"""Where the brokers advertise theirs (``KafkaCluster(advertised_host=...)``) when the proxy reaches them through
Toxiproxy (``route_brokers``)."""


class Fault(NamedTuple):
    """A fault to lay on routes for ``seconds``: toxics (kind, stream, attributes) or, ``partition``, the routes cut."""

    name: str
    toxics: tuple[tuple[str, str, dict[str, int]], ...] = ()
    partition: bool = False
    seconds: float = 3.0


def _both_ways(kind: str, **attributes: int) -> tuple[tuple[str, str, dict[str, int]], ...]:
    return tuple((kind, stream, attributes) for stream in ("upstream", "downstream"))


FAULTS = (
    Fault("latency with jitter", _both_ways("latency", latency=100, jitter=50)),  # ms
    Fault("bandwidth limit", _both_ways("bandwidth", rate=100)),  # KB/s
    Fault("slicer", _both_ways("slicer", average_size=24, size_variation=16, delay=50)),  # bytes; delay in us
    Fault("reset_peer", (("reset_peer", "downstream", {"timeout": 500}),)),  # connections reset after 500 ms
    Fault("timeout (a black hole)", (("timeout", "downstream", {"timeout": 0}),)),  # nothing through, none closed
    Fault("limit_data", (("limit_data", "downstream", {"bytes": 30_000}),)),  # closed after 30 KB
    Fault("partition", partition=True, seconds=10.0),
)
"""The faults the tests and the soak inject: each a way a network (or a load balancer in it) misbehaves."""


class Toxiproxy:
    """A Toxiproxy server of this process's own. ``route`` forwards an address to another; ``toxic`` disturbs a
    route; ``partition`` cuts it; ``heal`` takes every toxic away and every route back."""

    def __init__(self) -> None:
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._routes: dict[str, tuple[Address, Address]] = {}

    def start(self, timeout_s: float = 30.0) -> Toxiproxy:
        server = toxiproxy_server()
        self._process = subprocess.Popen([str(server), "-host", LOOPBACK, "-port", str(self.port)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._call("GET", "/version")
                return self
            except (OSError, urllib.error.URLError):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise ToxiproxyUnavailable(f"Toxiproxy did not answer on {LOOPBACK}:{self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._process = None

    def __enter__(self) -> Toxiproxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(f"http://{LOOPBACK}:{self.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
            return json.loads(text) if answer.headers.get_content_type() == "application/json" else text.decode()

    def route(self, name: str, listen: Address, upstream: Address) -> None:
        """Forward connections to ``listen`` on to ``upstream``."""
        self._call("POST", "/proxies", {"name": name, "listen": f"{listen[0]}:{listen[1]}",
                                        "upstream": f"{upstream[0]}:{upstream[1]}", "enabled": True})
        self._routes[name] = (listen, upstream)

    def unroute(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")
        del self._routes[name]

    @property
    def routes(self) -> list[str]:
        return list(self._routes)

    def toxic(self, route: str, kind: str, stream: str = "downstream", **attributes: int | float) -> str:
        """Add a toxic of ``kind`` to ``route`` in ``stream`` (``downstream``: towards the connecting side); its
        name, for ``remove``."""
        name = f"{kind}-{stream}"
        self._call("POST", f"/proxies/{route}/toxics", {"name": name, "type": kind, "stream": stream,
                                                         "toxicity": 1.0, "attributes": attributes})
        return name

    def remove(self, route: str, toxic: str) -> None:
        self._call("DELETE", f"/proxies/{route}/toxics/{toxic}")

    def partition(self, route: str, cut: bool = True) -> None:
        """Cut ``route`` (its listener closed, its connections cut) or, with ``cut`` False, restore it."""
        self._call("POST", f"/proxies/{route}", {"enabled": not cut})

    def lay(self, fault: Fault, prefix: str) -> list[str]:
        """``fault`` on every route whose name starts with ``prefix``; those routes."""
        routes = [route for route in self._routes if route.startswith(prefix)]
        for route in routes:
            if fault.partition:
                self.partition(route)
            for kind, stream, attributes in fault.toxics:
                self.toxic(route, kind, stream, **attributes)
        return routes

    def heal(self) -> None:
        """Every toxic removed, every route enabled."""
        self._call("POST", "/reset")


def route_brokers(toxiproxy: Toxiproxy, kafka: KafkaCluster) -> str:
    """Every broker listener of ``kafka`` (made with ``advertised_host=BROKER_SIDE``) reached through ``toxiproxy``,
    each route named ``broker-<id>-<listener>``; the bootstrap address to give the proxy."""
    for broker in kafka.brokers:
        assert broker.plaintext_port is not None and broker.sasl_port is not None
        for listener, port in (("plaintext", broker.plaintext_port), ("sasl", broker.sasl_port)):
            toxiproxy.route(f"broker-{broker.node_id}-{listener}", (BROKER_SIDE, port), (LOOPBACK, port))
    return ",".join(f"{BROKER_SIDE}:{broker.plaintext_port}" for broker in kafka.brokers)


def route_listeners(toxiproxy: Toxiproxy, bootstrap_port: int, broker_port_base: int,
                    node_ids: tuple[int, ...]) -> str:
    """A proxy's listeners (listening on ``LOOPBACK``, advertising ``CLIENT_SIDE``) reached through ``toxiproxy``,
    each route named ``client-...``; the bootstrap address to give its clients."""
    for name, port in (("client-bootstrap", bootstrap_port),
                       *((f"client-broker-{node}", broker_port_base + node) for node in node_ids)):
        toxiproxy.route(name, (CLIENT_SIDE, port), (LOOPBACK, port))
    return f"{CLIENT_SIDE}:{bootstrap_port}"
