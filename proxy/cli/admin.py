"""``kafka-quota-proxy users ...`` and ``kafka-quota-proxy quotas ...``: the operator's commands.

``users add`` writes a credential to the users file (the password is read from stdin when it is
not a terminal, otherwise prompted twice). ``quotas alter``/``quotas describe`` mirror
kafka-configs: they send AlterClientQuotas / DescribeClientQuotas to a proxy (or any broker).
``quotas explain`` reads a quota file (and a state directory's overrides) and says which quota
applies to a client, and why.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from pathlib import Path
from typing import Any

from protocol.apis import Api
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess, request_once
from proxy.handlers.client_quotas import CLIENT_ID, IP, MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, TENANT, TOPIC, USER
from proxy.security.tls import ReloadingContext, TlsConfigError, UpstreamTls
from proxy.security.users import (
    MECHANISMS,
    MIN_SCRAM_ITERATIONS,
    PLAIN,
    SaslConfigError,
    UserStore,
    load_users,
    plain_credential,
    save_users,
    scram_credential,
)
from proxy.settings.config import ConfigError, HostPort, UpstreamSasl
from quotas.config import ANONYMOUS, QuotaConfig, QuotaConfigError, load_quota_file
from quotas.explain import explain, explain_tenant, parse_client
from quotas.overrides import OVERRIDES_FILE, overlaid, read_overrides

_ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP, "topics": TOPIC, "tenants": TENANT}
_CLIENT_QUOTAS_VERSION = 1
_TIMEOUT_S = 30.0
_MAX_FRAME_BYTES = 100 * 1024 * 1024


class _Entity(argparse.Action):
    """--entity-type starts a component; --entity-name/--entity-default name the last one (kafka-configs order)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        components: list[list[Any]] = namespace.entities
        if option_string == "--entity-type":
            components.append([_ENTITY_TYPES[values], MATCH_ANY, None])
            return
        if not components or components[-1][1] != MATCH_ANY:
            parser.error(f"{option_string} must follow an --entity-type")
        components[-1][1:] = [MATCH_DEFAULT, None] if option_string == "--entity-default" else [MATCH_EXACT, values]


def _read_password(prompt: str, confirm: bool) -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    password = getpass.getpass(prompt)
    if confirm and getpass.getpass("Again: ") != password:
        raise ConfigError("the passwords do not match")
    return password


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafka-quota-proxy")
    commands = parser.add_subparsers(dest="command", required=True)

    users = commands.add_parser("users", help="manage the SASL users file").add_subparsers(dest="action", required=True)
    add = users.add_parser("add", help="add or replace a user's credential (password from stdin or a prompt)")
    add.add_argument("name")
    add.add_argument("--mechanism", required=True, choices=MECHANISMS)
    add.add_argument("--users-file", required=True, type=Path)
    add.add_argument("--iterations", type=int, help="PBKDF2 iterations (default: 8192 for SCRAM, 100000 for PLAIN)")
    remove = users.add_parser("remove", help="remove a user (all mechanisms)")
    remove.add_argument("name")
    remove.add_argument("--users-file", required=True, type=Path)

    quotas = commands.add_parser("quotas", help="alter, describe (like kafka-configs) or explain client quotas")
    actions = quotas.add_subparsers(dest="action", required=True)
    explained = actions.add_parser("explain", help="which quota applies to a client, and why")
    explained.add_argument("--quota-file", type=Path, help="the proxy's quota file")
    explained.add_argument("--state-dir", type=Path, help="the proxy's state directory: its quotas set through "
                           "AlterClientQuotas (kafka-configs) are in force too")
    explained.add_argument("--user", default=ANONYMOUS, help=f"the principal (default {ANONYMOUS}: no SASL)")
    explained.add_argument("--client-id", default="", help="the client id (default: none)")
    explained.add_argument("--ip", help="the client's address (for the connection creation rate)")
    explained.add_argument("--topic", help="a topic the client writes or reads (for the topic quotas)")
    explained.add_argument("--json", action="store_true", help="print JSON")
    for name in ("alter", "describe"):
        action = actions.add_parser(name)
        action.set_defaults(entities=[])
        action.add_argument("--bootstrap-server", required=True, help="HOST:PORT of the proxy")
        action.add_argument("--entity-type", choices=sorted(_ENTITY_TYPES), action=_Entity, required=True)
        action.add_argument("--entity-name", action=_Entity)
        action.add_argument("--entity-default", action=_Entity, nargs=0)
        action.add_argument("--sasl-mechanism", choices=MECHANISMS)
        action.add_argument("--sasl-username")
        action.add_argument("--ssl-cafile", type=Path, help="TLS to the proxy, trusting this CA")
        action.add_argument("--ssl-certfile", type=Path, help="client certificate (mTLS)")
        action.add_argument("--ssl-keyfile", type=Path)
        if name == "alter":
            action.add_argument("--add-config", default="", help="k=v[,k=v...]")
            action.add_argument("--delete-config", default="", help="k[,k...]")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "users":
            return _users(args)
        if args.action == "explain":
            return _explain(args)
        return asyncio.run(_quotas(args))
    except (ConfigError, SaslConfigError, QuotaConfigError) as error:
        print(f"kafka-quota-proxy: {error}", file=sys.stderr)
        return 2
    except UPSTREAM_ERRORS as error:
        print(f"kafka-quota-proxy: cannot reach {args.bootstrap_server}: {error or type(error).__name__}",
              file=sys.stderr)
        return 1


def _users(args: argparse.Namespace) -> int:
    path: Path = args.users_file
    store = load_users(path) if path.exists() else UserStore({})
    if args.action == "remove":
        if store.users.pop(args.name, None) is None:
            print(f"kafka-quota-proxy: no user {args.name!r} in {path}", file=sys.stderr)
            return 1
        save_users(path, store)
        print(f"removed user {args.name} from {path}")
        return 0
    password = _read_password(f"Password for {args.name}: ", confirm=True)
    if not password:
        raise ConfigError("the password is empty")
    if args.iterations is not None and args.iterations < (1 if args.mechanism == PLAIN else MIN_SCRAM_ITERATIONS):
        raise ConfigError(f"--iterations: too few (SCRAM needs at least {MIN_SCRAM_ITERATIONS})")
    credential = (plain_credential(password, args.iterations) if args.mechanism == PLAIN
                  else scram_credential(args.mechanism, password, args.iterations))
    store.users.setdefault(args.name, {})[args.mechanism] = credential
    save_users(path, store)
    print(f"stored {args.mechanism} credentials of user {args.name} in {path}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    if args.quota_file is None and args.state_dir is None:
        raise ConfigError("explain needs --quota-file, --state-dir or both: the quotas the proxy runs with")
    who = parse_client(args.user, args.client_id, args.ip, args.topic)
    file_config = QuotaConfig() if args.quota_file is None else load_quota_file(args.quota_file)
    overrides_path = None if args.state_dir is None else args.state_dir / OVERRIDES_FILE
    if args.state_dir is not None and not args.state_dir.is_dir():
        raise ConfigError(f"--state-dir {args.state_dir}: not a directory")
    overrides = read_overrides(overrides_path) if overrides_path is not None and overrides_path.exists() else {}
    config = overlaid(file_config, overrides, None if overrides_path is None else str(overrides_path))
    explanations = explain(config, who)
    tenant = explain_tenant(config, who)
    if args.json:
        print(json.dumps({"user": who.user, "client_id": who.client_id, "ip": who.ip, "topic": who.topic,
                          "quotas": [explanation.as_json() for explanation in explanations],
                          "tenant": None if tenant is None else tenant.as_json()}, indent=1))
        return 0
    print(f"Quotas of user {who.user!r}, client id {who.client_id!r}" + ("" if who.ip is None else f", ip {who.ip}")
          + ("" if who.topic is None else f", topic {who.topic!r}") + ":")
    for explanation in explanations:
        print("  " + explanation.text())
    print("  " + ("no tenant" if tenant is None else tenant.text()))
    return 0


async def _quotas(args: argparse.Namespace) -> int:
    target = HostPort.parse(args.bootstrap_server, "--bootstrap-server")
    sasl = None
    if args.sasl_mechanism:
        if not args.sasl_username:
            raise ConfigError("--sasl-username is needed with --sasl-mechanism")
        sasl = UpstreamSasl(args.sasl_mechanism, args.sasl_username, _read_password("Password: ", confirm=False))
    tls = None
    if args.ssl_cafile or args.ssl_certfile:
        settings = UpstreamTls(args.ssl_cafile, args.ssl_certfile, args.ssl_keyfile)
        try:
            tls = ReloadingContext(settings.context, settings.files(), "client")
        except TlsConfigError as error:
            raise ConfigError(str(error)) from None
    access = UpstreamAccess(sasl, tls)
    if args.action == "alter":
        return await _alter(args, target, access)
    return await _describe(args, target, access)


async def _alter(args: argparse.Namespace, target: HostPort, access: UpstreamAccess) -> int:
    if any(match == MATCH_ANY for _, match, _ in args.entities):
        raise ConfigError("alter needs --entity-name or --entity-default after each --entity-type")
    ops = []
    for pair in filter(None, args.add_config.split(",")):
        key, separator, value = pair.partition("=")
        try:
            ops.append({"key": key.strip(), "value": float(value), "remove": False})
        except ValueError:
            raise ConfigError(f"--add-config: expected key=number, got {pair!r}") from None
        if not separator:
            raise ConfigError(f"--add-config: expected key=number, got {pair!r}")
    ops += [{"key": key.strip(), "value": 0.0, "remove": True} for key in filter(None, args.delete_config.split(","))]
    if not ops:
        raise ConfigError("nothing to alter: give --add-config and/or --delete-config")
    entity = [{"entity_type": entity_type, "entity_name": name} for entity_type, _, name in args.entities]
    response = await request_once(target, Api.ALTER_CLIENT_QUOTAS, _CLIENT_QUOTAS_VERSION,
                                  {"entries": [{"entity": entity, "ops": ops}], "validate_only": False},
                                  _TIMEOUT_S, _MAX_FRAME_BYTES, access)
    failed = [entry for entry in response.entries if entry.error_code]
    for entry in failed:
        print(f"kafka-quota-proxy: error {entry.error_code}: {entry.error_message}", file=sys.stderr)
    if failed:
        return 1
    print(f"Completed updating config for {_describe_entity(args.entities)}.")
    return 0


async def _describe(args: argparse.Namespace, target: HostPort, access: UpstreamAccess) -> int:
    components = [{"entity_type": entity_type, "match_type": match, "match": name}
                  for entity_type, match, name in args.entities]
    response = await request_once(target, Api.DESCRIBE_CLIENT_QUOTAS, _CLIENT_QUOTAS_VERSION,
                                  {"components": components, "strict": False}, _TIMEOUT_S, _MAX_FRAME_BYTES,
                                  access)
    if response.error_code:
        print(f"kafka-quota-proxy: error {response.error_code}: {response.error_message}", file=sys.stderr)
        return 1
    for entry in response.entries or ():
        entity = [(e.entity_type, MATCH_DEFAULT if e.entity_name is None else MATCH_EXACT, e.entity_name)
                  for e in entry.entity]
        values = ",".join(f"{v.key}={_number(v.value)}" for v in entry.values)
        print(f"Quota configs for {_describe_entity(entity)} are {values}")
    return 0


def _number(value: float) -> str:
    """Whole rates without a fraction or exponent (1048576, not 1.04858e+06)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _describe_entity(components: list[Any]) -> str:
    words = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip", TOPIC: "topic", TENANT: "tenant"}
    return " and ".join(f"the default {words[entity_type]}" if match == MATCH_DEFAULT
                        else f"{words[entity_type]} '{name}'" for entity_type, match, name in components)
