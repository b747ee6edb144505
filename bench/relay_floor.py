"""The floor under any proxy's CPU per MB on this machine: a relay that only moves bytes from one loopback
TCP connection to another, measured the two ways a Python proxy can move them (``python -m bench.relay_floor``,
part of ``make bench``; writes bench/relay-floor-results.json).

- ``copy``: what the proxy does, with nothing decided: uvloop reads into one reused buffer
  (``BufferedProtocol``), each read is copied out once and written to the other connection;
- ``splice``: the bytes never enter user space: ``os.splice`` from the socket into a 1 MiB pipe and from
  the pipe into the other socket, uvloop's loop telling when either is ready;
- ``copy_tls``: ``copy`` with TLS from the source, which the relay ends (uvloop's TLS, as the proxy's listener
  with ``[tls]``); ``copy_tls_both``: TLS on both connections, the relay decrypting and encrypting again (the proxy
  with ``[tls]`` and ``[upstream-tls]``). The source writes full 16 KB TLS records (as Kafka's Java producer does).

The source and the sink run in this process (1 MiB ``sendall``/``recv`` on threads); the relay is a child
process whose CPU time (user and system) over the transfer is what is reported, per MB, medians of
interleaved rounds. On loopback the kernel's TCP work of both hops is counted to the processes that send,
so most of a relay's cost is system time whichever way it moves the bytes.

The same copying relay in both directions, in front of a broker (``ForwardingRelay``), is the floor beside the
proxy in ``bench.request_cost``: what a request costs through a Python relay that decides nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import uvloop

from bench.report import write_results
from bench.rounds import rotated
from tests.certificates import CertificateAuthority

MODES = ("copy", "splice", "copy_tls", "copy_tls_both")
TLS_FROM_SOURCE = frozenset({"copy_tls", "copy_tls_both"})
"""The modes with TLS between the source and the relay."""
TLS_TO_SINK = frozenset({"copy_tls_both"})
"""The modes with TLS between the relay and the sink too."""
_CHUNK = 1 << 20
_READ_BYTES = 256 * 1024  # the proxy's largest read


class _CopyRelay(asyncio.BufferedProtocol):
    """Each read copied out of one reused buffer and written to ``peer``. With ``done``, the end of what it reads sets
    it; without, a relay in both directions (``forward``), either connection's end closes the other."""

    def __init__(self, peer: asyncio.Transport | None, done: asyncio.Future[None] | None = None) -> None:
        self.peer, self._done = peer, done
        self._buffer = memoryview(bytearray(_READ_BYTES))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        assert self.peer is not None, "the other side answers only once this one has written to it"
        self.peer.write(bytes(self._buffer[:nbytes]))

    def eof_received(self) -> bool:
        if self._done is not None:
            self._done.set_result(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._done is None and self.peer is not None:
            self.peer.close()


class _SpliceRelay(asyncio.Protocol):
    """Reads nothing through its transport once splicing: the socket's bytes are spliced while its reading
    is paused (the descriptors are duplicated, as uvloop refuses readers on a transport's own descriptor)."""

    def __init__(self, upstream: asyncio.Transport, done: asyncio.Future[None]) -> None:
        self._upstream, self._done = upstream, done
        self._in_pipe = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._source = os.dup(transport.get_extra_info("socket").fileno())
        self._sink = os.dup(self._upstream.get_extra_info("socket").fileno())
        self._pipe_out, self._pipe_in = os.pipe2(os.O_NONBLOCK)
        fcntl.fcntl(self._pipe_in, fcntl.F_SETPIPE_SZ, _CHUNK)
        # uvloop reads once connection_made has returned, whatever was paused in it: pause after
        self._loop.call_soon(self._start)

    def data_received(self, data: bytes) -> None:
        """What uvloop read before the pause took: forwarded ahead of everything spliced."""
        self._upstream.write(data)

    def _start(self) -> None:
        self._transport.pause_reading()  # type: ignore[attr-defined]
        if self._upstream.get_write_buffer_size():  # spliced bytes must not overtake written ones
            self._loop.call_later(0.001, self._start)
            return
        self._loop.add_reader(self._source, self._move)

    def _move(self) -> None:
        flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
        while True:
            try:
                read = os.splice(self._source, self._pipe_in, _CHUNK, flags=flags)
            except BlockingIOError:
                read = -1
            self._in_pipe += max(read, 0)
            while self._in_pipe:
                try:
                    self._in_pipe -= os.splice(self._pipe_out, self._sink, self._in_pipe, flags=flags)
                except BlockingIOError:  # the sink is full: read nothing more until it drains
                    self._loop.remove_reader(self._source)
                    self._loop.add_writer(self._sink, self._drained)
                    return
            if read == 0:
                self._loop.remove_reader(self._source)
                self._done.set_result(None)
            if read <= 0:
                return

    def _drained(self) -> None:
        self._loop.remove_writer(self._sink)
        self._loop.add_reader(self._source, self._move)
        self._move()


class _Pki(NamedTuple):
    cafile: Path
    """Trusted by every client side (the source, and the relay's upstream side in ``copy_tls_both``)."""
    certfile: Path
    keyfile: Path
    """The one key pair of every server side (the relay's listener, and the sink in ``copy_tls_both``)."""

    @classmethod
    def make(cls, directory: Path) -> _Pki:
        ca = CertificateAuthority(directory)
        issued = ca.issue("relay", "relay", server=True)
        return cls(ca.cafile, issued.certfile, issued.keyfile)

    def server(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certfile, self.keyfile)
        return context

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cafile)


class _Closing(asyncio.Protocol):
    def __init__(self, closed: asyncio.Future[None]) -> None:
        self._closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed.set_result(None)


def relay(mode: str, sink_port: int, pki: _Pki | None) -> None:
    """The child: relay one connection to ``sink_port``; print the listening port, then wait."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        upstream, _ = await loop.create_connection(lambda: _Closing(closed), "127.0.0.1", sink_port,
                                                   ssl=pki.client() if pki and mode in TLS_TO_SINK else None)
        done: asyncio.Future[None] = loop.create_future()
        kind = _SpliceRelay if mode == "splice" else _CopyRelay
        server = await loop.create_server(lambda: kind(upstream, done), "127.0.0.1", 0,  # type: ignore[arg-type]
                                          ssl=pki.server() if pki and mode in TLS_FROM_SOURCE else None)
        print(server.sockets[0].getsockname()[1], flush=True)
        await done
        while upstream.get_write_buffer_size():
            await asyncio.sleep(0.001)
        upstream.close()  # with TLS, once what was encrypted has gone and the sink has had TLS's end of data
        await asyncio.wait_for(closed, 30)

    uvloop.run(run())


def forward(upstream: str) -> None:
    """The child: a relay in front of ``upstream`` (host:port) that decides nothing, the floor under a proxy's cost
    per request: each client connection gets its own upstream connection and both directions are copied as
    ``copy`` copies them. Prints the listening port, then serves until killed."""
    host, port = upstream.rsplit(":", 1)

    async def relay_one(loop: asyncio.AbstractEventLoop, client: socket.socket) -> None:
        from_cluster = _CopyRelay(None)
        to_cluster, _ = await loop.create_connection(lambda: from_cluster, host, int(port))
        to_client, _ = await loop.connect_accepted_socket(lambda: _CopyRelay(to_cluster), client)
        from_cluster.peer = to_client

    async def run() -> None:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        print(listener.getsockname()[1], flush=True)
        relaying: set[asyncio.Task[None]] = set()
        while True:
            client, _ = await loop.sock_accept(listener)
            task = loop.create_task(relay_one(loop, client))
            relaying.add(task)
            task.add_done_callback(relaying.discard)

    uvloop.run(run())


class ForwardingRelay:
    """``forward`` in a child process (``python -m bench.relay_floor --forward-to``): clients connect to
    ``bootstrap``; ``process`` is the child whose CPU is counted."""

    def __init__(self, upstream: str) -> None:
        self._child = subprocess.Popen([sys.executable, "-m", "bench.relay_floor", "--forward-to", upstream],
                                       stdout=subprocess.PIPE, text=True)
        assert self._child.stdout is not None
        self.bootstrap = f"127.0.0.1:{int(self._child.stdout.readline())}"
        self.process = psutil.Process(self._child.pid)

    def __enter__(self) -> ForwardingRelay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._child.kill()
        self._child.wait(30)


def one_round(mode: str, megabytes: int, sink_receive_buffer: int, pki: _Pki | None) -> dict[str, float]:
    sink = socket.create_server(("127.0.0.1", 0))
    if sink_receive_buffer:  # inherited by the accepted socket, as Kafka's acceptor sets it
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sink_receive_buffer)
    tls = mode in TLS_FROM_SOURCE
    assert pki is not None or not tls
    pki_args = ["--pki", str(pki.cafile), str(pki.certfile), str(pki.keyfile)] if pki and tls else []
    child = subprocess.Popen([sys.executable, "-m", "bench.relay_floor", "--relay", mode, *pki_args,
                              "--sink-port", str(sink.getsockname()[1])], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    received = 0

    def drain() -> None:
        nonlocal received
        connection, _ = sink.accept()
        if pki is not None and mode in TLS_TO_SINK:
            connection = pki.server().wrap_socket(connection, server_side=True)
        with connection:
            while data := connection.recv(_CHUNK):
                received += len(data)

    sinking = threading.Thread(target=drain)
    sinking.start()  # before the relay is ready: with TLS to the sink, the relay's handshake needs the sink's part
    relay_port = int(child.stdout.readline())
    process = psutil.Process(child.pid)
    chunk = b"x" * _CHUNK
    with socket.create_connection(("127.0.0.1", relay_port)) as connection:
        source = pki.client().wrap_socket(connection, server_hostname="127.0.0.1") if pki and tls else connection
        before, started = process.cpu_times(), time.perf_counter()
        for _ in range(megabytes):
            source.sendall(chunk)
        if isinstance(source, ssl.SSLSocket):
            source.unwrap()  # TLS's end of data (close_notify), answered once the relay has sent everything on
        else:
            source.shutdown(socket.SHUT_WR)
        sinking.join()
        after, elapsed = process.cpu_times(), time.perf_counter() - started
    child.wait(30)
    sink.close()
    if received != megabytes * _CHUNK:
        raise RuntimeError(f"{mode}: {received} bytes arrived of {megabytes * _CHUNK}")
    mb = received / 1e6
    system_s = after.system - before.system
    return {"mb_s": mb / elapsed, "cpu_ms_per_mb": 1000 * (after.user - before.user + system_s) / mb,
            "system_ms_per_mb": 1000 * system_s / mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/relay-floor-results.json")
    parser.add_argument("--megabytes", type=int, default=2000, help="MiB moved per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--sink-receive-buffer", type=int, default=0,
                        help="SO_RCVBUF of the sink's socket (Kafka's socket.receive.buffer.bytes is 102400; "
                        "default: the kernel's autotuning)")
    parser.add_argument("--relay", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--sink-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pki", nargs=3, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--forward-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.forward_to:
        forward(args.forward_to)
        return 0
    if args.relay:
        relay(args.relay, args.sink_port, _Pki(*args.pki) if args.pki else None)
        return 0
    modes: list[str] = args.modes
    pki = _Pki.make(Path(tempfile.mkdtemp(prefix="kqp-relay-floor-"))) if TLS_FROM_SOURCE.intersection(modes) else None
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for round_index in range(args.rounds):
        for mode in rotated(modes, round_index):
            runs[mode].append(one_round(mode, args.megabytes, args.sink_receive_buffer, pki))
    results: dict[str, Any] = {"machine": {"cpus": psutil.cpu_count()}, "settings": {
        "megabytes": args.megabytes, "rounds": args.rounds, "sink_receive_buffer": args.sink_receive_buffer}}
    for mode, figures in runs.items():
        results[mode] = {key: statistics.median(run[key] for run in figures) for key in figures[0]}
        results[mode]["cpu_ms_per_mb_runs"] = [round(run["cpu_ms_per_mb"], 3) for run in figures]
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
