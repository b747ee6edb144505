"""A rewritten answer is queued as its body's own object: a body remembered for the cluster's bytes is held once
however many clients that read nothing have it waiting."""

from __future__ import annotations

from proxy.connection.responses import frame_pieces
from tests.unit.proxy.connection.test_outbox import outbox

HEADER = (7).to_bytes(4, "big")  # a correlation id


def test_the_pieces_make_the_frame_with_the_body_itself() -> None:
    body = b"b" * 70_000
    frame = memoryview(HEADER + b"upstream body")
    head, rest = frame_pieces(frame, len(HEADER), body)
    assert rest is body
    assert head + rest == (len(HEADER) + len(body)).to_bytes(4, "big") + HEADER + body


def test_clients_that_read_nothing_hold_one_remembered_body_between_them() -> None:
    remembered = b"m" * 70_000  # a Metadata answer of a thousand topics, rewritten once
    transports = []
    for _ in range(3):
        box, transport, _ = outbox()
        transport.sendable = 0  # the client reads nothing
        for _ in range(2):
            box.writelines(frame_pieces(memoryview(HEADER), len(HEADER), remembered))
        transports.append(transport)
    queued_bodies = [piece for transport in transports for piece in transport.held if len(piece) == len(remembered)]
    assert len(queued_bodies) == 6
    assert all(piece is remembered for piece in queued_bodies)
