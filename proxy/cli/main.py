"""``kafka-quota-proxy``: run the proxy until SIGTERM/SIGINT (or run an admin command: ``users``, ``quotas``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import sys
import time
from dataclasses import replace

import uvloop

from allocator.durable import DirectoryLocked
from allocator.ledger import LedgerCorrupt
from proxy.cli import admin
from proxy.runtime.serving import ProxyServer, metrics_socket
from proxy.security.users import SaslConfigError
from proxy.settings.config import ConfigError, HostPort, ProxyConfig
from proxy.settings.loading import build_parser, load_config
from quotas.config import QuotaConfigError

# ready/stopping/stopped are part of the CLI contract: logged whatever --log-level says
log = logging.getLogger("proxy.lifecycle")


async def serve(config: ProxyConfig, held_metrics_socket: socket.socket | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = ProxyServer(config, held_metrics_socket=held_metrics_socket)
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
        return admin.main(argv)
    if argv and argv[0] == "report":
        return _report(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args)
    except ConfigError as error:
        print(f"kafka-quota-proxy: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s" if config.workers > 1
                        else "%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    _raise_open_file_limit()
    if config.workers > 1:
        return _supervise(config)
    return _run(config)


def _run(config: ProxyConfig, held_metrics_socket: socket.socket | None = None) -> int:
    try:
        uvloop.run(serve(config, held_metrics_socket))
    except (QuotaConfigError, SaslConfigError, ConfigError, LedgerCorrupt, DirectoryLocked) as error:
        log.error("cannot start: %s", error)
        return 2
    except OSError as error:
        log.error("cannot start: %s", error)
        return 1
    return 0


WORKER_RESTART_DELAY_S = 1.0


def worker_config(config: ProxyConfig, worker: int) -> ProxyConfig:
    """Worker ``worker``'s settings: its own state directory (each has its own lock, ledger and logs) and
    metrics port (the metrics port + ``worker``, every sample labelled ``worker``)."""
    metrics = config.metrics_listen
    return replace(config, worker=worker, state_dir=config.state_dir / f"worker-{worker}",
                   metrics_listen=None if metrics is None else HostPort(metrics.host, metrics.port + worker))


def _supervise(config: ProxyConfig) -> int:
    """Fork the workers (before any event loop or thread exists), pass SIGTERM/SIGINT on to them, start a
    worker that died again; a worker that cannot start (exit 2: its configuration) stops them all.

    Each worker's metrics socket is bound here, once, and handed to every start of that worker (see
    ``metrics_socket``); the shared listeners need no holding: the other workers keep their ports bound."""
    children: dict[int, int] = {}
    stopping = False
    try:
        metrics_sockets = {worker: metrics_socket(listen.host, listen.port) for worker in range(config.workers)
                           if (listen := worker_config(config, worker).metrics_listen) is not None}
    except OSError as error:
        log.error("cannot start: %s", error)
        return 1

    def spawn(worker: int) -> None:
        pid = os.fork()
        if pid == 0:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            for other, sock in metrics_sockets.items():
                if other != worker:
                    sock.close()
            os._exit(_run(worker_config(config, worker), metrics_sockets.get(worker)))
        children[pid] = worker

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for worker in range(config.workers):
        spawn(worker)
    worst = 0
    while children:
        pid, status = os.wait()
        worker = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, code)
        if stopping:
            continue
        if code == 2:
            log.error("worker %d cannot start (exit 2): stopping the others", worker)
            stop(signal.SIGTERM, None)
            continue
        log.error("worker %d exited with %d: starting it again in %.0f s", worker, code, WORKER_RESTART_DELAY_S)
        time.sleep(WORKER_RESTART_DELAY_S)
        if not stopping:
            spawn(worker)
    return 0 if stopping and worst <= 0 else worst
