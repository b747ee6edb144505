"""Every top-level setting, defined once: its name in ``ProxyConfig``, its TOML key (which is also its flag), what
it means and what applies without it. The command line (``loading.build_parser``), the --config file's keys and
the configuration reference (``python -m proxy.cli.settings_reference``) are all made from this table, and the
defaults shown are the values the dataclasses below use, so none of them can say something the others do not."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, NamedTuple

from proxy.security.sasl import LoginSettings
from proxy.settings.config import AuthorizerSettings, ConfigError, ProxyConfig

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
SASL_MODES = ("none", "terminate", "inspect")
DEFAULT_LISTEN = "127.0.0.1:9092"
REQUIRED = "required"


class Setting(NamedTuple):
    name: str
    """The ``ProxyConfig`` field it fills (the parsed flags' attribute)."""
    key: str
    """Its key in the --config file, and its flag (``--key``) unless ``flag`` is False."""
    meaning: str
    default: Any
    """The value that applies when the setting is not given, as TOML writes it, or None when nothing does (no
    limit, or a value derived from other settings, which ``derived`` says)."""
    options: dict[str, Any] = {}
    """How argparse reads the flag (``type``, ``choices``, ``action``)."""
    flag: bool = True
    derived: str = ""
    """Without the setting: what applies, when that is not one value."""


PROXY_DEFAULTS: dict[str, Any] = {field.name: field.default for field in fields(ProxyConfig)}
"""``ProxyConfig``'s field defaults, by name: what applies without a setting."""
_LOGIN = LoginSettings()
_AUTHORIZER = AuthorizerSettings()
_AUTHORIZER_ENABLED_BY_DEFAULT = PROXY_DEFAULTS["authorizer"] is not None
_OAUTHBEARER = _LOGIN.oauthbearer

SETTINGS: tuple[Setting, ...] = (
    Setting("upstream", "upstream",
            "bootstrap servers of the cluster: HOST:PORT[,HOST:PORT...] (in --config, a string or a list)", None,
            derived=REQUIRED),
    Setting("listen", "listen", "the bootstrap listener, HOST:PORT", DEFAULT_LISTEN),
    Setting("advertised_host", "advertised-host", "the host clients are told to connect to", None,
            derived="the listen host; this machine's name when it listens on every address"),
    Setting("broker_port_base", "broker-port-base", "the broker with node id N is served on base + N", None,
            options={"type": int}, derived="the listen port + 1"),
    Setting("metrics_listen", "metrics-listen", "serve Prometheus text on HOST:PORT/metrics", None,
            derived="no metrics endpoint"),
    Setting("quota_file", "quota-file", "the TOML quota file, read again when it changes", None,
            derived="no quotas until AlterClientQuotas sets some"),
    Setting("state_dir", "state-dir", "durable state: client-quotas.json, usage/, pid-ledger/, "
            "producer-id-blocks.log, allocator-epoch; one proxy per directory",
            str(PROXY_DEFAULTS["state_dir"])),
    Setting("log_level", "log-level", f"one of {', '.join(LOG_LEVELS)}", PROXY_DEFAULTS["log_level"],
            {"type": str.upper, "choices": LOG_LEVELS}),
    Setting("max_frame_bytes", "max-frame-bytes", "larger, negative or garbled frame sizes close the connection",
            PROXY_DEFAULTS["max_frame_bytes"],
            {"type": int}),
    Setting("idle_timeout_s", "idle-timeout-seconds", "connections with no traffic either way for this long are closed",
            PROXY_DEFAULTS["idle_timeout_s"], {"type": float}),
    Setting("connect_timeout_s", "connect-timeout-seconds", "give up opening an upstream connection after this long",
            PROXY_DEFAULTS["connect_timeout_s"], {"type": float}),
    Setting("request_timeout_s", "request-timeout-seconds",
            "a forwarded request the cluster sends nothing for in this long closes its connection (the "
            "client's request.timeout.ms)",
            PROXY_DEFAULTS["request_timeout_s"], {"type": float}),
    Setting("usage_retention_days", "usage-retention-days", "delete usage-log files older than this",
            PROXY_DEFAULTS["usage_retention_days"], {"type": float}),
    Setting("write_buffer_high_bytes", "write-buffer-high-bytes",
            "stop reading one side of a connection while the other side has this much unsent (or the "
            "connection's share of max-buffered-bytes, when smaller)",
            PROXY_DEFAULTS["write_buffer_high_bytes"], {"type": int}),
    Setting("max_buffered_bytes", "max-buffered-bytes",
            "unsent bytes all connections may hold together: each side of each connection gets an equal "
            "share, never less than 64 KiB",
            PROXY_DEFAULTS["max_buffered_bytes"], {"type": int}),
    Setting("max_in_flight_requests", "max-in-flight-requests", "per connection; later requests are read only "
            "once one is answered (this also bounds the work one connection gets at a time)",
            PROXY_DEFAULTS["max_in_flight_requests"], {"type": int}),
    Setting("shutdown_grace_s", "shutdown-grace-seconds",
            "on SIGTERM, how long in-flight requests may take to finish", PROXY_DEFAULTS["shutdown_grace_s"],
            {"type": float}),
    Setting("splice", "splice", "the rest of a large plaintext Produce request moves from the client's socket to "
            "the cluster's inside the kernel (splice(2)), and the rest of a large Fetch response the other way; "
            "--no-splice turns it off",
            PROXY_DEFAULTS["splice"], {"action": argparse.BooleanOptionalAction}),
    Setting("sasl_users", "sasl-users", "TOML users file: clients must log in with SASL PLAIN or SCRAM-SHA-256/512",
            None, derived="no logins: every connection is user ANONYMOUS"),
    Setting("sasl_mode", "sasl-mode", "terminate: clients log in to the proxy (sasl-users); inspect: clients log in "
            "to the cluster through the proxy, which takes the user name once the cluster accepts it", None,
            {"choices": SASL_MODES}, derived="terminate with sasl-users, else none"),
    Setting("sasl_login_timeout_s", "sasl-login-timeout-seconds", "close a connection not logged in by then",
            _LOGIN.timeout_s, {"type": float}),
    Setting("sasl_failed_authentication_delay_ms", "sasl-failed-authentication-delay-ms",
            "a failed login is answered and closed this late (Kafka's connection.failed.authentication.delay.ms)",
            round(_LOGIN.failed_delay_s * 1000), {"type": int}),
    Setting("sasl_max_receive_bytes", "sasl-max-receive-bytes",
            "the largest frame before a login completes (Kafka's sasl.server.max.receive.size)",
            _LOGIN.max_receive_bytes, {"type": int}),
    Setting("sasl_login_threads", "sasl-login-threads", "threads hashing PLAIN passwords, off the event loop",
            PROXY_DEFAULTS["login_threads"], {"type": int}),
    Setting("oauthbearer_unsecured_jwt", "oauthbearer-unsecured-jwt",
            "terminate: accept unsigned JWTs (Kafka's unsecured validator), for tests only",
            _LOGIN.oauthbearer.unsecured_jwt, flag=False),
    Setting("default_num_partitions", "default-num-partitions",
            "partitions charged for CreateTopics num_partitions=-1 when the cluster does not tell",
            PROXY_DEFAULTS["default_num_partitions"], {"type": int}),
    Setting("max_connections", "max-connections",
            "open client connections over all listeners; beyond it the proxy accepts nothing until one "
            "closes", None,
            {"type": int}, derived="no limit"),
    Setting("max_connections_per_ip", "max-connections-per-ip",
            "beyond it an IP's new connections are closed at once", None, {"type": int}, derived="no limit"),
    Setting("max_connections_per_ip_overrides", "max-connections-per-ip-overrides",
            "IP:COUNT[,IP:COUNT...] (Kafka's max.connections.per.ip.overrides)", None, derived="none"),
    Setting("max_connection_creation_rate", "max-connection-creation-rate",
            "new connections/s over all listeners; beyond it accepting waits (Kafka's listener setting)", None,
            {"type": float}, derived="no limit"),
    Setting("workers", "workers", "processes accepting on the same listeners (SO_REUSEPORT), each a member of the "
            "[fleet]; worker i keeps its state in STATE_DIR/worker-i and serves metrics on the metrics port + i",
            PROXY_DEFAULTS["workers"], {"type": int}),
)
BY_KEY = {setting.key: setting for setting in SETTINGS}


class TableKey(NamedTuple):
    """A key of one of the --config file's tables."""

    key: str
    meaning: str
    default: Any = None
    """As ``Setting.default``: None when no one value applies (``derived`` says what does)."""
    derived: str = ""


class Table(NamedTuple):
    name: str
    purpose: str
    keys: tuple[TableKey, ...]

    def required(self) -> set[str]:
        return {key.key for key in self.keys if key.derived == REQUIRED}

    def names(self) -> set[str]:
        return {key.key for key in self.keys}

    def default(self, key: str) -> Any:
        """What applies without ``key``, as the table's parser applies it."""
        return next(entry.default for entry in self.keys if entry.key == key)

    def refuse_unknown(self, given: Any) -> None:
        """Raise ConfigError naming the keys of ``given`` (the table as read) that are not this table's."""
        unknown = sorted(set(given) - self.names())
        if unknown:
            raise ConfigError(f"[{self.name}]: unknown key(s) {', '.join(unknown)}")


TABLES: tuple[Table, ...] = (
    Table("tls", "TLS on every client listener (SSL, or SASL_SSL with sasl-users)", (
        TableKey("certfile", "the listener's certificate chain, PEM", derived=REQUIRED),
        TableKey("keyfile", "its private key, PEM", derived=REQUIRED),
        TableKey("cafile", "the CAs client certificates are verified against", derived="none; needed when "
                 "client-auth is requested or required"),
        TableKey("client-auth", "none, requested or required (Kafka's ssl.client.auth); a client certificate names "
                 "the principal", "none"),
        TableKey("principal-mapping-rules", "Kafka's ssl.principal.mapping.rules, from a certificate's subject to a "
                 "principal", "DEFAULT"),
        TableKey("ciphers", "OpenSSL cipher list", derived="OpenSSL's defaults"),
        TableKey("min-version", "the oldest TLS version accepted: 1.2 or 1.3", "1.2"),
    )),
    Table("upstream-tls", "TLS to the cluster", (
        TableKey("cafile", "the CAs the cluster's certificates are verified against", derived="the system's"),
        TableKey("certfile", "the proxy's client certificate, for clusters that ask for one", derived="none"),
        TableKey("keyfile", "its private key", derived="none (with certfile: the key is in certfile)"),
        TableKey("check-hostname", "verify that the certificate names the broker's host", True),
    )),
    Table("upstream-sasl", "the proxy's own login to the cluster, on every upstream connection", (
        TableKey("mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", derived=REQUIRED),
        TableKey("username", "the proxy's user on the cluster", derived=REQUIRED),
        TableKey("password", "its password (or password-file; exactly one of them)", derived="none"),
        TableKey("password-file", "a file whose first line is the password", derived="none"),
    )),
    Table("oauthbearer", "OAUTHBEARER logins: Kafka's sasl.oauthbearer.* settings (KIP-768) without the prefix", (
        TableKey("jwks.endpoint.url", "terminate: JWTs must be signed by a key of this JWKS, a file:// (read again "
                 "when it changes) or an http(s):// endpoint", derived="no OAUTHBEARER logins at the proxy"),
        TableKey("jwks.endpoint.refresh.ms", "how often an http(s) JWKS is fetched again (and at once when a token "
                 "names a key it lacks)", _OAUTHBEARER.jwks_endpoint_refresh_ms),
        TableKey("jwks.endpoint.retry.backoff.ms", "the first wait after a failed fetch, doubled each try",
                 _OAUTHBEARER.jwks_endpoint_retry_backoff_ms),
        TableKey("jwks.endpoint.retry.backoff.max.ms", "how long a fetch is retried (at start: the proxy does not "
                 "start without keys)", _OAUTHBEARER.jwks_endpoint_retry_backoff_max_ms),
        TableKey("expected.audience", "a token's aud must name one of these (a list)",
                 derived="none: a token naming an audience is refused (jose4j's default, which Kafka keeps)"),
        TableKey("expected.issuer", "a token's iss must be this", derived="any issuer"),
        TableKey("scope.claim.name", "the claim holding the token's scopes", _OAUTHBEARER.scope_claim_name),
        TableKey("sub.claim.name", "the claim naming the principal (in inspect mode too)",
                 _OAUTHBEARER.sub_claim_name),
        TableKey("clock.skew.seconds", "how far the token issuer's clock may be from the proxy's",
                 _OAUTHBEARER.clock_skew_s),
    )),
    Table("admin", "who may use AlterClientQuotas and DescribeClientQuotas", (
        TableKey("principals", 'a list such as ["User:ops"]', derived="required in the table; without the "
                 "table nobody may, but with [authorizer] those its ACLs allow"),
    )),
    Table("authorizer", "Kafka's ACLs decided at the proxy, as Kafka's StandardAuthorizer decides them", (
        TableKey("enabled", "judge requests by the ACLs (without it the table's other keys do nothing, as Kafka's "
                 "without authorizer.class.name)", _AUTHORIZER_ENABLED_BY_DEFAULT),
        TableKey("super-users", 'principals allowed everything, such as ["User:admin"] (Kafka\'s super.users)',
                 list(_AUTHORIZER.super_users)),
        TableKey("allow-everyone-if-no-acl-found", "a resource no ACL covers is open to every principal",
                 _AUTHORIZER.allow_everyone_if_no_acl_found),
        TableKey("acl-file", "the ACLs, as [[acl]] tables (docs/authorizer.md), read again when the file changes; "
                 "kafka-acls adds and removes others over them",
                 derived="no ACLs: only super users are allowed, unless allow-everyone-if-no-acl-found"),
    )),
    Table("metrics", "protecting /metrics and /quotas/explain", (
        TableKey("username", "basic authentication's user", derived="none: no authentication"),
        TableKey("password", "its password (or password-file; exactly one of them, with username)", derived="none"),
        TableKey("password-file", "a file whose first line is the password", derived="none"),
        TableKey("certfile", "serve HTTPS with this certificate chain (with keyfile)", derived="none: HTTP"),
        TableKey("keyfile", "its private key", derived="none"),
    )),
)
TABLE_BY_NAME = {table.name: table for table in TABLES}


def shown(value: Any) -> str:
    """A default as the --config file writes it (sizes in MiB beside their bytes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(shown(item) for item in value) + "]"
    if isinstance(value, int) and value >= 1 << 40 and value & (value - 1) == 0:
        return f"{value} (2^{value.bit_length() - 1})"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value} ({value >> 20} MiB)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f'"{value}"' if isinstance(value, str) else str(value)


def default_text(setting: Setting | TableKey) -> str:
    return setting.derived if setting.default is None else shown(setting.default)
