"""The proxy's settings, as the rest of the proxy reads them (``loading`` builds them from the
command line and the --config file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.security.sasl import LoginSettings
from proxy.security.tls import ListenerTls, UpstreamTls
from quotas.connection_quotas import ConnectionLimits

MIB = 1024 * 1024


class ConfigError(ValueError):
    """A setting is missing or invalid; the message says which and why."""


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, what: str) -> HostPort:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{what}: expected HOST:PORT, got {text!r}")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class UpstreamSasl:
    """The proxy's own login to the cluster (``[upstream-sasl]`` in the --config file)."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class MetricsEndpoint:
    """``[metrics]``: basic authentication and TLS for /metrics (both off by default)."""

    credentials: str | None = field(default=None, repr=False)
    """``user:password``."""
    tls: ListenerTls | None = None


@dataclass(frozen=True)
class AuthorizerSettings:
    """``[authorizer]``: Kafka's ACLs decided at the proxy (Kafka's ``authorizer.class.name`` with
    ``StandardAuthorizer``, and its ``super.users`` and ``allow.everyone.if.no.acl.found``)."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    acl_file: Path | None = None
    """The ACLs, read again when the file changes."""


@dataclass(frozen=True)
class ProxyConfig:
    upstream: tuple[HostPort, ...]
    listen: HostPort
    advertised_host: str
    broker_port_base: int
    metrics_listen: HostPort | None = None
    quota_file: Path | None = None
    state_dir: Path = Path("state")
    log_level: str = "INFO"
    max_frame_bytes: int = 100 * MIB
    idle_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    """A forwarded request the cluster has not answered by then closes its connection (the client's
    own ``request.timeout.ms`` default)."""
    usage_retention_days: float = 7.0
    write_buffer_high_bytes: int = 4 * MIB
    """Each side of a connection stops being read while the other side has this much unsent (or its share
    of ``max_buffered_bytes``, when smaller)."""
    max_buffered_bytes: int = 256 * MIB
    """What all connections may hold unsent together: with many connections, each gets an equal share."""
    max_in_flight_requests: int = 32
    """Requests a connection has unanswered before the proxy reads no more of it: this also bounds how much
    work one connection is given at a time, so that a client flooding requests cannot starve the others."""
    shutdown_grace_s: float = 5.0
    splice: bool = True
    """The rest of a large request frame moves from the client's socket to the cluster's inside the kernel
    (``splice(2)``), when both are plaintext sockets and no producer-ID quota needs its batches."""
    sasl_users: Path | None = None
    sasl_mode: str = "none"
    """``none`` (every client ANONYMOUS), ``terminate`` (the proxy verifies logins against ``sasl_users``)
    or ``inspect`` (the cluster verifies them; the proxy reads the user name)."""
    login: LoginSettings = field(default_factory=LoginSettings)
    login_threads: int = 1
    """Threads hashing PLAIN passwords, off the event loop: a flood of logins takes no more CPU than this."""
    upstream_sasl: UpstreamSasl | None = None
    tls: ListenerTls | None = None
    metrics_endpoint: MetricsEndpoint = field(default_factory=lambda: MetricsEndpoint())
    upstream_tls: UpstreamTls | None = None
    admin_principals: frozenset[str] = frozenset()
    """``[admin] principals``: who may use AlterClientQuotas and DescribeClientQuotas (none without it)."""
    authorizer: AuthorizerSettings | None = None
    """The ACLs' settings when ``[authorizer] enabled``; None: no request is judged by ACLs."""
    default_num_partitions: int = 1
    """Partitions a CreateTopics with num_partitions = -1 is charged for when the cluster does not
    say its ``num.partitions`` (DescribeConfigs)."""
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    """Kafka's ``max.connections``, ``max.connections.per.ip`` (+ overrides) and the listener's
    ``max.connection.creation.rate``, over all the client listeners."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Sections of the TOML file that other subsystems read (e.g. ``[allocator]``)."""
    workers: int = 1
    """Processes serving the same listeners (SO_REUSEPORT), each a member of the fleet."""
    worker: int | None = None
    """Which of them this process is (None: the only one)."""

    @property
    def advertised_bootstrap(self) -> str:
        """Where clients are told this proxy's bootstrap listener is: its name among proxies."""
        return f"{self.advertised_host}:{self.listen.port}"
