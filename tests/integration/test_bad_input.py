"""Every kind of bad frame closes only the connection that sent it, with a log line."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaProducer

from tests.support import ProxyProcess, encode_request, wait_until

pytestmark = pytest.mark.integration

PRODUCE_V9_HEADER_ONLY = struct.pack(">hhih", 0, 9, 7, 3) + b"bad" + b"\x00"


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


BAD_INPUTS = {
    "oversized frame": (struct.pack(">i", 0x7FFF_FFFF) + b"\x00" * 16, "frame size"),
    "negative size": (struct.pack(">i", -42) + b"\x00" * 16, "frame size"),
    "garbled size (HTTP)": (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "frame size"),
    "too small for a header": (struct.pack(">i", 3) + b"abc", "frame size"),
    "truncated frame": (struct.pack(">i", 100) + b"\x00" * 20, "truncated frame"),
    # large enough to be forwarded as it arrives (cut-through) before the client gives up
    "truncated large frame": (struct.pack(">i", 4 << 20) + struct.pack(">hhih", 18, 0, 5, -1) + b"\x00" * 200_000,
                              "truncated frame"),
    "unknown api key": (frame(struct.pack(">hhih", 31_000, 0, 1, -1)), "unknown api key"),
    "undecodable Produce": (frame(PRODUCE_V9_HEADER_ONLY), "Produce request truncated"),
}


@pytest.fixture
def steady_producer(proxy: ProxyProcess, topic: str) -> Iterator[tuple[list[int], list[Exception]]]:
    """A well-behaved client producing through the same proxy for the whole test."""
    delivered: list[int] = []
    errors: list[Exception] = []
    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", retries=0)

    def produce() -> None:
        while not stop.is_set():
            try:
                delivered.append(producer.send(topic, value=b"steady").get(timeout=30).offset)
            except Exception as error:  # any failure is what the test looks for
                errors.append(error)
            time.sleep(0.01)

    thread = threading.Thread(target=produce)
    thread.start()
    while not delivered and not errors:
        time.sleep(0.01)
    yield delivered, errors
    stop.set()
    thread.join()
    producer.close()


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_frame_closes_only_that_connection(
        proxy: ProxyProcess, steady_producer: tuple[list[int], list[Exception]], name: str) -> None:
    delivered, errors = steady_producer
    payload, reason = BAD_INPUTS[name]
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        # "from HOST:PORT " and not a bare "HOST:PORT": the client's port can be one the ready line names
        # (the brokers' base port is not listened on) or a prefix of one
        closed_from = f"from 127.0.0.1:{sock.getsockname()[1]} "
        sock.sendall(payload)
        if name.startswith("truncated"):
            sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1024) == b"", "the proxy should close the connection"
    log = proxy.wait_for_log(closed_from)
    line = next(line for line in log.splitlines() if closed_from in line)
    assert reason in line
    # the same proxy keeps serving everybody else: a new connection, and the steady producer, whose records go one
    # at a time (the second delivered from now was sent after the bad frame's connection was closed)
    delivered_before = len(delivered)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(encode_request(18, 0, correlation_id=99))
        response = sock.recv(4096)
        assert struct.unpack_from(">i", response, 4)[0] == 99
    wait_until(lambda: errors or len(delivered) >= delivered_before + 2, 30, "the steady producer's next records")
    assert errors == []
