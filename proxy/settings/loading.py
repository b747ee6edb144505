"""Proxy settings from command-line flags and an optional TOML file (flags win), checked as they are read."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy import __version__
from proxy.decision.outcome import PRINCIPAL_PREFIX
from proxy.files.toml_file import read_toml
from proxy.security.oauthbearer import OAuthBearerSettings
from proxy.security.sasl import LoginSettings
from proxy.security.tls import CLIENT_AUTH, TLS_VERSIONS, ListenerTls, PrincipalMapper, TlsConfigError, UpstreamTls
from proxy.security.users import MECHANISMS
from proxy.settings.config import AuthorizerSettings, ConfigError, HostPort, MetricsEndpoint, ProxyConfig, UpstreamSasl
from proxy.settings.definitions import (
    BY_KEY,
    DEFAULT_LISTEN,
    LOG_LEVELS,
    PROXY_DEFAULTS,
    REQUIRED,
    SASL_MODES,
    SETTINGS,
    TABLE_BY_NAME,
    Setting,
    default_text,
)
from quotas.config import DEFAULT, QuotaConfigError, normalized_ip
from quotas.connection_quotas import ConnectionLimits

_SETTINGS = {setting.name: setting.key for setting in SETTINGS}
"""Each setting's --config key (its flag's name too), by its name in ``ProxyConfig``."""
_UPSTREAM_SASL_SECTION = "upstream-sasl"
_TLS_SECTION = "tls"
_METRICS_SECTION = "metrics"
_UPSTREAM_TLS_SECTION = "upstream-tls"
_ADMIN_SECTION = "admin"
_AUTHORIZER_SECTION = "authorizer"
_OAUTHBEARER_SECTION = "oauthbearer"
_JWKS_SCHEMES = ("file", "http", "https")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-quota-proxy",
        description="Kafka-protocol proxy enforcing Kafka quota semantics per principal.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", help="TOML file providing any of these settings; flags win")
    for setting in SETTINGS:
        if setting.flag:
            parser.add_argument(f"--{setting.key}", dest=setting.name, metavar=setting.key.upper().replace("-", "_"),
                                **setting.options,
                                help=f"{setting.meaning} ({_default_help(setting)})")
    return parser


def _default_help(setting: Setting) -> str:
    text = default_text(setting)
    return text if text == REQUIRED else f"default: {text}"


def _settings_from_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    document = read_toml(path, ConfigError)
    settings: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, dict):
            extra[key] = value
        elif key in BY_KEY:
            settings[BY_KEY[key].name] = value
        else:
            raise ConfigError(f"{path}: unknown setting {key!r}")
    return settings, extra


def _positive(name: str, value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{_SETTINGS[name]}: expected a number, got {value!r}") from error
    if number <= 0:
        raise ConfigError(f"{_SETTINGS[name]}: must be positive, got {value!r}")
    return number


def load_config(args: argparse.Namespace) -> ProxyConfig:
    settings: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if args.config:
        settings, extra = _settings_from_file(Path(args.config))
    for name in _SETTINGS:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = value

    upstream_text = settings.get("upstream")
    if not upstream_text:
        raise ConfigError("upstream: required (--upstream HOST:PORT[,HOST:PORT...] or in --config)")
    if isinstance(upstream_text, list):
        upstream_text = ",".join(upstream_text)
    upstream = tuple(HostPort.parse(part, "upstream") for part in str(upstream_text).split(",") if part)
    listen = HostPort.parse(str(settings.get("listen", DEFAULT_LISTEN)), "listen")
    advertised_host = settings.get("advertised_host") or _default_advertised_host(listen.host)
    base = int(settings.get("broker_port_base", listen.port + 1))
    if not 0 < base < 65536:
        raise ConfigError(f"broker-port-base: must be a port number, got {base}")
    metrics = settings.get("metrics_listen")
    quota_file = settings.get("quota_file")
    log_level = str(settings.get("log_level", PROXY_DEFAULTS["log_level"])).upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"log-level: one of {', '.join(LOG_LEVELS)}, got {log_level!r}")

    tunables = {
        name: _positive(name, settings.get(name, PROXY_DEFAULTS[name]), type(PROXY_DEFAULTS[name]))
        for name in ("max_frame_bytes", "idle_timeout_s", "connect_timeout_s", "request_timeout_s",
                     "usage_retention_days", "write_buffer_high_bytes", "max_buffered_bytes", "max_in_flight_requests",
                     "shutdown_grace_s", "default_num_partitions")
    }
    splice = settings.get("splice", PROXY_DEFAULTS["splice"])
    if not isinstance(splice, bool):
        raise ConfigError(f"splice: true or false, got {splice!r}")
    sasl_users = settings.get("sasl_users")
    sasl_mode, login = _login_settings(settings, extra.pop(_OAUTHBEARER_SECTION, None))
    connection_limits = ConnectionLimits(
        max_connections=_optional_positive("max_connections", settings, int),
        max_connections_per_ip=_optional_positive("max_connections_per_ip", settings, int),
        max_connections_per_ip_overrides=_ip_overrides(settings.get("max_connections_per_ip_overrides")),
        max_connection_creation_rate=_optional_positive("max_connection_creation_rate", settings, float))
    return ProxyConfig(
        upstream=upstream,
        listen=listen,
        advertised_host=str(advertised_host),
        broker_port_base=base,
        metrics_listen=HostPort.parse(str(metrics), "metrics-listen") if metrics else None,
        quota_file=Path(quota_file) if quota_file else None,
        state_dir=Path(settings.get("state_dir", PROXY_DEFAULTS["state_dir"])),
        log_level=log_level,
        splice=splice,
        sasl_users=Path(sasl_users) if sasl_users else None,
        sasl_mode=sasl_mode,
        login=login,
        login_threads=_optional_positive("sasl_login_threads", settings, int) or PROXY_DEFAULTS["login_threads"],
        upstream_sasl=_upstream_sasl(extra.pop(_UPSTREAM_SASL_SECTION, None)),
        tls=_listener_tls(extra.pop(_TLS_SECTION, None)),
        upstream_tls=_upstream_tls(extra.pop(_UPSTREAM_TLS_SECTION, None)),
        metrics_endpoint=_metrics_endpoint(extra.pop(_METRICS_SECTION, None)),
        admin_principals=_admin_principals(extra.pop(_ADMIN_SECTION, None)),
        authorizer=_authorizer(extra.pop(_AUTHORIZER_SECTION, None)),
        connection_limits=connection_limits,
        extra=extra,
        workers=_workers(settings.get("workers", 1), extra),
        **tunables,
    )


def _login_settings(settings: dict[str, Any], oauthbearer_section: dict[str, Any] | None) -> tuple[str, LoginSettings]:
    mode = settings.get("sasl_mode") or ("terminate" if settings.get("sasl_users") else "none")
    if mode not in SASL_MODES:
        raise ConfigError(f"sasl-mode: one of {', '.join(SASL_MODES)}, got {mode!r}")
    unsecured = settings.get("oauthbearer_unsecured_jwt", False)
    if not isinstance(unsecured, bool) or (unsecured and mode != "terminate"):
        raise ConfigError("oauthbearer-unsecured-jwt: true or false, and true only with sasl-mode terminate")
    oauthbearer = _oauthbearer(oauthbearer_section or {}, unsecured)
    if oauthbearer.jwks_endpoint_url is not None and (mode != "terminate" or unsecured):
        raise ConfigError(f"[{_OAUTHBEARER_SECTION}] jwks.endpoint.url: only with sasl-mode terminate (in inspect mode "
                          "the cluster checks tokens), and not with oauthbearer-unsecured-jwt")
    if settings.get("sasl_users") and mode != "terminate":
        raise ConfigError("sasl-users: only with sasl-mode terminate")
    if mode == "terminate" and not settings.get("sasl_users") and not oauthbearer.validates_tokens:
        raise ConfigError(f"sasl-mode terminate: needs sasl-users, or [{_OAUTHBEARER_SECTION}] jwks.endpoint.url for "
                          "OAUTHBEARER logins, or both")
    defaults = LoginSettings()
    delay_ms = settings.get("sasl_failed_authentication_delay_ms", defaults.failed_delay_s * 1000)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)) or delay_ms < 0:
        raise ConfigError(f"sasl-failed-authentication-delay-ms: a number >= 0, got {delay_ms!r}")
    return mode, LoginSettings(
        timeout_s=_optional_positive("sasl_login_timeout_s", settings, float) or defaults.timeout_s,
        failed_delay_s=delay_ms / 1000,
        max_receive_bytes=_optional_positive("sasl_max_receive_bytes", settings, int) or defaults.max_receive_bytes,
        oauthbearer=oauthbearer)


def _dotted(section: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table whose keys are Kafka's dotted names: TOML reads ``jwks.endpoint.url = ...`` as nested tables."""
    flat: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            flat |= _dotted(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _oauthbearer(nested: dict[str, Any], unsecured: bool) -> OAuthBearerSettings:
    where = f"[{_OAUTHBEARER_SECTION}]"
    section = _dotted(nested)
    TABLE_BY_NAME[_OAUTHBEARER_SECTION].refuse_unknown(section)
    defaults = OAuthBearerSettings()

    def text(key: str, default: str | None) -> str | None:
        value = section.get(key, default)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{where} {key}: a non-empty string, got {value!r}")
        return value

    def whole(key: str, default: int, least: int) -> int:
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{where} {key}: a whole number >= {least}, got {value!r}")
        return value

    url = text("jwks.endpoint.url", None)
    if url is not None and urlsplit(url).scheme.lower() not in _JWKS_SCHEMES:
        raise ConfigError(f"{where} jwks.endpoint.url: a {', '.join(_JWKS_SCHEMES)} URL, got {url!r}")
    audience = section.get("expected.audience", [])
    if not isinstance(audience, list) or not all(isinstance(entry, str) and entry for entry in audience):
        raise ConfigError(f"{where} expected.audience: a list of strings, got {audience!r}")
    return OAuthBearerSettings(
        jwks_endpoint_url=url,
        jwks_endpoint_refresh_ms=whole("jwks.endpoint.refresh.ms", defaults.jwks_endpoint_refresh_ms, 1),
        jwks_endpoint_retry_backoff_ms=whole("jwks.endpoint.retry.backoff.ms",
                                             defaults.jwks_endpoint_retry_backoff_ms, 1),
        jwks_endpoint_retry_backoff_max_ms=whole("jwks.endpoint.retry.backoff.max.ms",
                                                 defaults.jwks_endpoint_retry_backoff_max_ms, 1),
        expected_audience=tuple(audience),
        expected_issuer=text("expected.issuer", None),
        scope_claim_name=str(text("scope.claim.name", defaults.scope_claim_name)),
        sub_claim_name=str(text("sub.claim.name", defaults.sub_claim_name)),
        clock_skew_s=whole("clock.skew.seconds", defaults.clock_skew_s, 0),
        unsecured_jwt=unsecured)


def _workers(value: Any, extra: dict[str, Any]) -> int:
    workers = _positive("workers", value, int)
    if workers > 1 and "fleet" not in extra:
        raise ConfigError("workers: more than one needs a [fleet] table in --config (the workers share their "
                          "quotas through it)")
    return int(workers)


def _optional_positive(name: str, settings: dict[str, Any], kind: type) -> Any:
    value = settings.get(name)
    if value is None:
        return None
    if kind is int and (isinstance(value, bool) or (isinstance(value, float) and not value.is_integer())):
        raise ConfigError(f"{_SETTINGS[name]}: expected a whole number, got {value!r}")
    return _positive(name, value, kind)


def _ip_overrides(value: Any) -> dict[str, int]:
    """Kafka's ``IP:COUNT,IP:COUNT`` (an IPv6 address keeps its colons: the count follows the last)."""
    if value is None:
        return {}
    where = _SETTINGS["max_connections_per_ip_overrides"]
    overrides: dict[str, int] = {}
    for part in str(value).split(","):
        host, _, count = part.strip().rpartition(":")
        try:
            ip = normalized_ip(host)
            overrides[ip] = int(count)
        except (QuotaConfigError, ValueError):
            raise ConfigError(f"{where}: expected IP:COUNT[,IP:COUNT...], got {part!r}") from None
        if ip == DEFAULT or overrides[ip] < 0:
            raise ConfigError(f"{where}: expected IP:COUNT with an IP address and a count >= 0, got {part!r}")
    return overrides


def principal_list(value: Any, where: str) -> frozenset[str]:
    """Kafka principals such as ``["User:alice"]``; raises ConfigError naming ``where`` otherwise."""
    if not isinstance(value, list) or not all(isinstance(item, str) and item.startswith(PRINCIPAL_PREFIX)
                                              and len(item) > len(PRINCIPAL_PREFIX) for item in value):
        raise ConfigError(f"{where}: a list of principals such as [\"User:alice\"], got {value!r}")
    return frozenset(value)


def _admin_principals(section: dict[str, Any] | None) -> frozenset[str]:
    if section is None:
        return frozenset()
    where = f"[{_ADMIN_SECTION}]"
    if set(section) != TABLE_BY_NAME[_ADMIN_SECTION].names():
        raise ConfigError(f"{where}: needs exactly the key principals")
    return principal_list(section["principals"], f"{where} principals")


def _authorizer(section: dict[str, Any] | None) -> AuthorizerSettings | None:
    if section is None:
        return None
    where = f"[{_AUTHORIZER_SECTION}]"
    table = TABLE_BY_NAME[_AUTHORIZER_SECTION]
    table.refuse_unknown(section)
    flags = {}
    for key in ("enabled", "allow-everyone-if-no-acl-found"):
        flags[key] = section.get(key, table.default(key))
        if not isinstance(flags[key], bool):
            raise ConfigError(f"{where} {key}: true or false, got {flags[key]!r}")
    acl_file = section.get("acl-file")
    if acl_file is not None and not (isinstance(acl_file, str) and acl_file):
        raise ConfigError(f"{where} acl-file: a path, got {acl_file!r}")
    super_users = principal_list(section.get("super-users", []), f"{where} super-users")
    if not flags["enabled"]:
        return None
    return AuthorizerSettings(super_users, flags["allow-everyone-if-no-acl-found"],
                              Path(acl_file) if acl_file else None)


def _keys(section: dict[str, Any], name: str) -> None:
    """The table's keys are the ones its definition (``TABLE_BY_NAME``) names, the required ones among them, and
    strings (but check-hostname)."""
    where = f"[{name}]"
    table = TABLE_BY_NAME[name]
    table.refuse_unknown(section)
    missing = table.required() - set(section)
    if missing:
        raise ConfigError(f"{where}: needs {', '.join(sorted(missing))}")
    for key, value in section.items():
        if key != "check-hostname" and not isinstance(value, str):
            raise ConfigError(f"{where} {key}: a string, got {value!r}")


def _path(section: dict[str, Any], key: str) -> Path | None:
    return Path(section[key]) if key in section else None


def _listener_tls(section: dict[str, Any] | None) -> ListenerTls | None:
    if section is None:
        return None
    where = f"[{_TLS_SECTION}]"
    _keys(section, _TLS_SECTION)
    defaults = TABLE_BY_NAME[_TLS_SECTION]
    client_auth = section.get("client-auth", defaults.default("client-auth"))
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(f"{where} client-auth: one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    if client_auth != "none" and "cafile" not in section:
        raise ConfigError(f"{where} cafile: needed to verify client certificates (client-auth {client_auth})")
    min_version = section.get("min-version", defaults.default("min-version"))
    if min_version not in TLS_VERSIONS:
        raise ConfigError(f"{where} min-version: one of {', '.join(TLS_VERSIONS)}, got {min_version!r}")
    tls = ListenerTls(Path(section["certfile"]), Path(section["keyfile"]), _path(section, "cafile"), client_auth,
                      section.get("principal-mapping-rules", defaults.default("principal-mapping-rules")),
                      section.get("ciphers"), min_version)
    try:
        PrincipalMapper(tls.principal_mapping_rules)
        tls.context()  # the files are read now: a mistake stops the start, not the first connection
    except TlsConfigError as error:
        raise ConfigError(str(error)) from None
    return tls


def _metrics_endpoint(section: dict[str, Any] | None) -> MetricsEndpoint:
    if section is None:
        return MetricsEndpoint()
    where = f"[{_METRICS_SECTION}]"
    _keys(section, _METRICS_SECTION)
    credentials = None
    if "username" in section:
        credentials = f"{section['username']}:{_secret(section, where)}"
    elif "password" in section or "password-file" in section:
        raise ConfigError(f"{where}: a password needs a username")
    tls = None
    if ("certfile" in section) != ("keyfile" in section):
        raise ConfigError(f"{where}: certfile and keyfile go together")
    if "certfile" in section:
        tls = ListenerTls(Path(section["certfile"]), Path(section["keyfile"]))
        try:
            tls.context()
        except TlsConfigError as error:
            raise ConfigError(str(error)) from None
    return MetricsEndpoint(credentials, tls)


def _secret(section: dict[str, Any], where: str) -> str:
    """``password`` or the first line of ``password-file`` (exactly one of them)."""
    if ("password" in section) == ("password-file" in section):
        raise ConfigError(f"{where}: set exactly one of password, password-file")
    password = section.get("password")
    if password is None:
        try:
            password = Path(section["password-file"]).read_text().rstrip("\n")
        except OSError as error:
            raise ConfigError(f"{where} password-file: cannot read: {error.strerror}") from error
    return str(password)


def _upstream_tls(section: dict[str, Any] | None) -> UpstreamTls | None:
    if section is None:
        return None
    where = f"[{_UPSTREAM_TLS_SECTION}]"
    _keys(section, _UPSTREAM_TLS_SECTION)
    check_hostname = section.get("check-hostname", TABLE_BY_NAME[_UPSTREAM_TLS_SECTION].default("check-hostname"))
    if not isinstance(check_hostname, bool):
        raise ConfigError(f"{where} check-hostname: true or false, got {check_hostname!r}")
    if "keyfile" in section and "certfile" not in section:
        raise ConfigError(f"{where} keyfile: needs certfile")
    tls = UpstreamTls(_path(section, "cafile"), _path(section, "certfile"), _path(section, "keyfile"), check_hostname)
    try:
        tls.context()
    except TlsConfigError as error:
        raise ConfigError(str(error)) from None
    return tls


def _upstream_sasl(section: dict[str, Any] | None) -> UpstreamSasl | None:
    if section is None:
        return None
    where = f"[{_UPSTREAM_SASL_SECTION}]"
    TABLE_BY_NAME[_UPSTREAM_SASL_SECTION].refuse_unknown(section)
    mechanism = section.get("mechanism")
    if mechanism not in MECHANISMS:
        raise ConfigError(f"{where} mechanism: one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    username = section.get("username")
    if not isinstance(username, str) or not username:
        raise ConfigError(f"{where} username: required")
    return UpstreamSasl(str(mechanism), username, _secret(section, where))


def _default_advertised_host(listen_host: str) -> str:
    if listen_host in ("0.0.0.0", "::", ""):
        import socket

        return socket.getfqdn()
    return listen_host
