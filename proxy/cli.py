"""``kafka-quota-proxy``: run the proxy until SIGTERM/SIGINT (or run an admin command: ``users``, ``quotas``)."""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys

import uvloop

from allocator.durable import DirectoryLocked
from allocator.ledger import LedgerCorrupt
from proxy import admin_cli
from proxy.config import ConfigError, ProxyConfig, build_parser, load_config
from proxy.sasl import SaslConfigError
from proxy.server import ProxyServer
from quotas.config import QuotaConfigError

# ready/stopping/stopped are part of the CLI contract: logged whatever --log-level says
log = logging.getLogger("proxy.lifecycle")


async def serve(config: ProxyConfig) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = ProxyServer(config)
    await server.start()
    log.info("ready: bootstrap %s, brokers on %s:%d+node_id", config.listen, config.advertised_host,
             config.broker_port_base)
    await stop.wait()
    log.info("stopping: no new connections, waiting up to %.1f s for in-flight requests",
             config.shutdown_grace_s)
    await server.shutdown()
    log.info("stopped")


def _report(argv: list[str]) -> int:
    try:
        from pipeline import job
    except ImportError as error:
        print(f"kafka-quota-proxy report needs the spark extra (pip install 'kafka-quota-proxy[spark]'): {error}",
              file=sys.stderr)
        return 2
    return job.main(argv)


def _raise_open_file_limit() -> None:
    """Each client costs two sockets (client and upstream); use all the descriptors allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


ADMIN_COMMANDS = ("users", "quotas")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ADMIN_COMMANDS:
        return admin_cli.main(argv)
    if argv and argv[0] == "report":
        return _report(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args)
    except ConfigError as error:
        print(f"kafka-quota-proxy: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    _raise_open_file_limit()
    try:
        uvloop.run(serve(config))
    except (QuotaConfigError, SaslConfigError, ConfigError, LedgerCorrupt, DirectoryLocked) as error:
        log.error("cannot start: %s", error)
        return 2
    except OSError as error:
        log.error("cannot start: %s", error)
        return 1
    return 0
