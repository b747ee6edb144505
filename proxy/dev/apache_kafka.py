"""Apache Kafka as child processes on free loopback ports: the cluster behind ``make run``, the
integration tests, the benchmarks and the soak.

The broker's jars (``kafka_jars``) are started with ``java -cp 'lib/*'``. Every node runs in KRaft
mode from a freshly formatted directory with three listeners: PLAINTEXT, SASL_PLAINTEXT (PLAIN,
SCRAM-SHA-256/512 and unsecured OAUTHBEARER logins) and CONTROLLER; given a certificate, its brokers have an
SSL listener too (Kafka's own TLS, ``SslCertificate``). A cluster is one combined node,
one combined node and two more brokers, or a controller apart from its broker, which may reach the
controller through an address of the caller's choosing (a proxy in ``[allocator] mode = "forward"``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import TracebackType

from protocol.apis import Api
from proxy.cluster.upstream import UPSTREAM_ERRORS, fetch_metadata, request_once
from proxy.dev.kafka_jars import ClassSharing, KafkaUnavailable, java_executable, kafka_libs
from proxy.settings.config import HostPort

LOOPBACK = "127.0.0.1"
_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_MAX_FRAME_BYTES = 16 << 20
# Kafka's own JVM options (bin/kafka-run-class.sh), so benchmarks see the broker users run
_JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")
_LOG4J2 = """status = warn
appender.server.type = File
appender.server.name = server
appender.server.fileName = {path}
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.server.ref = server
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


# ---- one node ------------------------------------------------------------------------------------------

_EPHEMERAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000


class _PortPicker:
    """Hands out runs of ports that are free now and outside the kernel's ephemeral range, each once per
    process until the range wraps. A port handed out stays free for whoever binds it a moment later: the
    kernel gives no outgoing connection a port outside that range (one was given a test proxy's port in
    CI, between the pick and the bind), and no later pick of this process returns it meanwhile."""

    def __init__(self) -> None:
        low, high = 32768, 60999  # Linux's default
        with contextlib.suppress(OSError, ValueError):
            low, high = map(int, _EPHEMERAL_PORT_RANGE.read_text().split())
        self._ports = [port for port in range(_LOWEST_PORT, 65536) if not low <= port <= high]
        self._next = random.randrange(len(self._ports))

    def run(self, host: str, count: int) -> int:
        """The first of ``count`` consecutive ports, all free."""
        ports = self._ports
        for _ in range(len(ports)):
            start = self._next
            self._next = (start + count) % len(ports)
            if start + count > len(ports) or ports[start + count - 1] != ports[start] + count - 1:
                continue  # the run would wrap, or straddle the ephemeral range
            if all(_bindable(host, port) for port in range(ports[start], ports[start] + count)):
                return ports[start]
        raise OSError(f"no {count} consecutive free ports outside the ephemeral range")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as listeners bind: TIME_WAIT is no obstacle
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@cache
def _port_picker() -> _PortPicker:
    return _PortPicker()


def free_ports(count: int, host: str = LOOPBACK) -> int:
    """The first of ``count`` consecutive ports free on ``host`` (``_PortPicker``)."""
    return _port_picker().run(host, count)


def free_port(host: str = LOOPBACK) -> int:
    return free_ports(1, host)


def new_cluster_id() -> str:
    """A cluster id as Kafka makes one (``Uuid.randomUuid()``: URL-safe base64, no padding, drawn again when
    it starts with '-', which the format command's argument parser would take for an option)."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


@dataclass(frozen=True)
class SaslUsers:
    """Who may log in on the SASL_PLAINTEXT listener. PLAIN users live in the listener's JAAS entry;
    SCRAM users (both SHA-256 and SHA-512) are written into the metadata log when it is formatted.
    OAUTHBEARER takes unsecured JWTs (``alg: none``): any subject logs in, for tests only."""

    plain: Mapping[str, str] = field(default_factory=dict)
    scram: Mapping[str, str] = field(default_factory=dict)


_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SCRAM_ITERATIONS = 4096


def _scram_argument(mechanism: str, name: str, password: str) -> str:
    """``--add-scram`` for one user. StorageTool splits its argument at every comma, quoted or not, so a
    password is handed over salted (PBKDF2, as Kafka's ScramFormatter computes it): base64 has no commas."""
    if "," in name or "]" in name:
        raise ValueError(f"a SCRAM user name Kafka's StorageTool can take has no ',' or ']': {name!r}")
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac(_SCRAM_HASHES[mechanism], password.encode(), salt, _SCRAM_ITERATIONS)
    return (f"{mechanism}=[name={name},salt={base64.b64encode(salt).decode()},"
            f"saltedpassword={base64.b64encode(salted).decode()},iterations={_SCRAM_ITERATIONS}]")


def _jaas_value(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class SslCertificate:
    """A broker's certificate and its unencrypted private key, PEM files, for an SSL listener: Kafka reads them
    as a PEM key store (KIP-651), the key and the chain in one file, written beside the node's configuration."""

    certfile: Path
    keyfile: Path


class KafkaNode:
    """One Apache Kafka process: broker, controller or both (KRaft combined mode)."""

    def __init__(self, directory: Path, node_id: int, *, broker: bool, controller: bool, users: SaslUsers,
                 log_path: Path, heap_mb: int = 512, advertised_host: str = LOOPBACK,
                 ssl: SslCertificate | None = None, system_properties: Mapping[str, str] | None = None) -> None:
        """``advertised_host``: where clients are told the broker's listeners are (their ports the same): another
        loopback address, where a fault injector forwards them on (``proxy.dev.toxiproxy``). ``ssl``: a broker
        also listens for TLS clients with it. ``system_properties``: the JVM's ``-D`` options (Kafka reads a few
        settings only there, such as the URLs its OAUTHBEARER validator may read)."""
        self.node_id = node_id
        self._system_properties = dict(system_properties or {})
        self.advertised_host = advertised_host
        self.directory = directory
        self.log_path = log_path
        self.roles = tuple(role for role, present in (("broker", broker), ("controller", controller)) if present)
        self.plaintext_port = free_port() if broker else None
        self.sasl_port = free_port() if broker else None
        self.ssl_port = free_port() if broker and ssl is not None else None
        self._ssl = ssl
        self.controller_port = free_port() if controller else None
        self._users = users
        self._heap_mb = heap_mb
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener: HOST:PORT."""
        assert self.plaintext_port is not None, f"node {self.node_id} is not a broker"
        return f"{LOOPBACK}:{self.plaintext_port}"

    @property
    def sasl_bootstrap(self) -> str:
        assert self.sasl_port is not None, f"node {self.node_id} is not a broker"
        return f"{LOOPBACK}:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        assert self.ssl_port is not None, f"node {self.node_id} has no SSL listener"
        return f"{LOOPBACK}:{self.ssl_port}"

    @property
    def controller_endpoint(self) -> str:
        assert self.controller_port is not None, f"node {self.node_id} is not a controller"
        return f"{LOOPBACK}:{self.controller_port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None or self._process.poll() is not None else self._process.pid

    def properties(self, quorum_voters: str, extra: Mapping[str, str]) -> dict[str, str]:
        listeners = []
        advertised = {}
        if self.plaintext_port is not None:
            listeners += [f"PLAINTEXT://{LOOPBACK}:{self.plaintext_port}", f"SASL_PLAINTEXT://{LOOPBACK}:{self.sasl_port}"]
            if self.advertised_host != LOOPBACK:
                advertised["advertised.listeners"] = (f"PLAINTEXT://{self.advertised_host}:{self.plaintext_port},"
                                                      f"SASL_PLAINTEXT://{self.advertised_host}:{self.sasl_port}")
        if self.ssl_port is not None:
            listeners.append(f"SSL://{LOOPBACK}:{self.ssl_port}")
            if self.advertised_host != LOOPBACK:
                advertised["advertised.listeners"] += f",SSL://{self.advertised_host}:{self.ssl_port}"
        if self.controller_port is not None:
            listeners.append(f"CONTROLLER://{LOOPBACK}:{self.controller_port}")
        plain_users = " ".join(f"user_{name}={_jaas_value(password)}" for name, password in self._users.plain.items())
        values = {
            "process.roles": ",".join(self.roles),
            "node.id": str(self.node_id),
            "controller.quorum.voters": quorum_voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            # a controller alone must name the brokers' listener too: Kafka checks inter.broker.listener.name
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            # one node holds every internal topic: replication factor 1, one partition each
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",  # the default is GSSAPI
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        }
        if self._ssl is not None:
            values |= {"listener.name.ssl.ssl.keystore.type": "PEM",
                       "listener.name.ssl.ssl.keystore.location": str(self.directory / "ssl-keystore.pem")}
        return values | advertised | dict(extra)

    def write_config(self, quorum_voters: str, extra: Mapping[str, str]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "server.properties"
        if self._ssl is not None:  # the key, then the chain: Kafka's PemStore reads both from the one file
            keystore = self._ssl.keyfile.read_text() + self._ssl.certfile.read_text()
            (self.directory / "ssl-keystore.pem").write_text(keystore)
        config.write_text("".join(f"{key}={value}\n" for key, value in
                                  self.properties(quorum_voters, extra).items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J2.format(path=self.log_path))
        return config

    def format(self, cluster_id: str) -> None:
        """Format the node's metadata directory (once; a restart keeps what it holds)."""
        if (self.directory / "data" / "meta.properties").exists():
            return
        scram = [] if "controller" not in self.roles else [
            argument for name, password in self._users.scram.items() for mechanism in _SCRAM_HASHES
            for argument in ("--add-scram", _scram_argument(mechanism, name, password))]
        done = subprocess.run([*self._java(), *ClassSharing.mapped(kafka_libs()), _STORAGE_TOOL, "format",
                               "-t", cluster_id, "-c", str(self.directory / "server.properties"), *scram],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise KafkaUnavailable(f"formatting node {self.node_id} failed:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the process (the caller waits until the cluster answers)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "stdout.log", "ab") as output:
            self._process = subprocess.Popen([*self._java(), _MAIN_CLASS, str(self.directory / "server.properties")],
                                             stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             cwd=self.directory, start_new_session=True)

    def _java(self) -> list[str]:
        return [java_executable(), f"-Xmx{self._heap_mb}m", f"-Xms{self._heap_mb}m", *_JVM_OPTIONS,
                *(f"-D{name}={value}" for name, value in self._system_properties.items()),
                f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                "-cp", str(kafka_libs() / "*")]

    def check_running(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            output = (self.directory / "stdout.log").read_text(errors="replace")[-3000:]
            log = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
            raise KafkaUnavailable(f"Apache Kafka node {self.node_id} exited with {self._process.returncode}:\n"
                                   f"{output}\n{log}")

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL if that takes longer than ``timeout_s``."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL: the node dies as a crashed machine's would, keeping what it wrote to disk."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: alive and connected, answering nothing (``resume`` undoes it)."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)


# ---- a cluster -----------------------------------------------------------------------------------------

class KafkaCluster:
    """Apache Kafka nodes in KRaft mode, formatted in a directory of their own that ``stop`` removes.

    ``brokers=1``: one node that is broker and controller. ``brokers=3``: that node and two brokers.
    ``dedicated_controller``: a controller alone (node 3000) and ``brokers`` brokers; ``start`` may then
    be told the address the brokers reach the controller at (a forwarding proxy in front of it).
    ``log_directory`` keeps each node's log (``kafka-<id>.log``) after ``stop``; default: the cluster's
    own directory, removed with it. ``advertised_host`` and ``ssl``: see ``KafkaNode``.
    """

    CONTROLLER_ID = 3000

    def __init__(self, brokers: int = 1, *, dedicated_controller: bool = False, users: SaslUsers | None = None,
                 directory: Path | None = None, log_directory: Path | None = None, heap_mb: int = 512,
                 extra_properties: Mapping[str, str] | None = None, advertised_host: str = LOOPBACK,
                 ssl: SslCertificate | None = None, system_properties: Mapping[str, str] | None = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self._own_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        logs = log_directory or self.directory
        users = users or SaslUsers()
        self.cluster_id = new_cluster_id()
        self._extra = dict(extra_properties or {})

        def node(node_id: int, broker: bool, controller: bool) -> KafkaNode:
            return KafkaNode(self.directory / f"node-{node_id}", node_id, broker=broker, controller=controller,
                             users=users, log_path=logs / f"kafka-{node_id}.log", heap_mb=heap_mb,
                             advertised_host=advertised_host, ssl=ssl, system_properties=system_properties)

        if dedicated_controller:
            self.controller = node(self.CONTROLLER_ID, broker=False, controller=True)
            self.brokers = [node(node_id, broker=True, controller=False) for node_id in range(1, brokers + 1)]
        else:
            self.controller = node(1, broker=True, controller=True)
            self.brokers = [self.controller] + [node(node_id, broker=True, controller=False)
                                                for node_id in range(2, brokers + 1)]

    @property
    def nodes(self) -> list[KafkaNode]:
        return list(dict.fromkeys([self.controller, *self.brokers]))

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(broker.node_id for broker in self.brokers)

    @property
    def bootstrap(self) -> str:
        """Every broker's PLAINTEXT listener, comma-separated."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(broker.sasl_bootstrap for broker in self.brokers)

    @property
    def ssl_bootstrap(self) -> str:
        """Every broker's SSL listener (a cluster given a certificate)."""
        return ",".join(broker.ssl_bootstrap for broker in self.brokers)

    def node(self, node_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == node_id)

    def start(self, controller_address: str | None = None, timeout_s: float = 120.0) -> KafkaCluster:
        """Format and start every node, then wait until the brokers answer Metadata naming them all.
        ``controller_address`` (HOST:PORT): where the brokers reach the controller, if not at its own listener."""
        self.start_controller(timeout_s)
        self.start_brokers(controller_address, timeout_s)
        return self

    def start_controller(self, timeout_s: float = 120.0) -> None:
        """Only the controller (a dedicated one: the brokers start later, maybe behind a proxy)."""
        self._start(self.controller, self._voters(self.controller.controller_endpoint))
        if "broker" not in self.controller.roles:
            self._wait(lambda: _answers_api_versions(self.controller.controller_endpoint), [self.controller],
                       timeout_s, f"controller {self.controller.controller_endpoint}")

    def start_brokers(self, controller_address: str | None = None, timeout_s: float = 120.0) -> None:
        voters = self._voters(controller_address or self.controller.controller_endpoint)
        for broker in self.brokers:
            if broker is not self.controller:
                self._start(broker, voters)
        self.wait_until_ready(timeout_s)

    def restart(self, node: KafkaNode, timeout_s: float = 120.0) -> None:
        """Start a stopped or killed node again on the same ports and data; wait until the cluster is whole."""
        node.start()
        if "broker" in node.roles:
            self.wait_until_ready(timeout_s)

    def wait_until_ready(self, timeout_s: float = 120.0) -> None:
        expected = {broker.node_id for broker in self.brokers}
        self._wait(lambda: expected <= _registered_brokers(self.bootstrap), self.nodes, timeout_s,
                   f"brokers {sorted(expected)} in the Metadata of {self.bootstrap}")

    def stop(self) -> None:
        """Brokers first (their controlled shutdown needs the controller), then the controller; the
        cluster's directory is removed (logs kept where ``log_directory`` put them)."""
        for broker in self.brokers:
            if broker is not self.controller:
                broker.stop()
        self.controller.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            for node in self.nodes:
                shutil.rmtree(node.directory, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _voters(self, controller_endpoint: str) -> str:
        return f"{self.controller.node_id}@{controller_endpoint}"

    def _start(self, node: KafkaNode, voters: str) -> None:
        node.write_config(voters, self._extra)
        node.format(self.cluster_id)
        node.start()

    @staticmethod
    def _wait(ready: Callable[[], bool], nodes: list[KafkaNode], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for node in nodes:
                node.check_running()
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"no answer from {what} after {timeout_s} s")
            time.sleep(0.2)


def _registered_brokers(bootstrap: str) -> set[int]:
    targets = tuple(HostPort.parse(part, "bootstrap") for part in bootstrap.split(","))
    try:
        metadata = asyncio.run(fetch_metadata(targets, [], 5.0, _MAX_FRAME_BYTES))
    except UPSTREAM_ERRORS:
        return set()
    return {broker.node_id for broker in metadata.brokers}


def _answers_api_versions(endpoint: str) -> bool:
    try:
        answer = asyncio.run(request_once(HostPort.parse(endpoint, "controller"), Api.API_VERSIONS, 0, {}, 5.0,
                                          _MAX_FRAME_BYTES))
    except UPSTREAM_ERRORS:
        return False
    return int(answer.error_code) == 0
