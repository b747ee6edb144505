"""The outbox gathers small pieces while its transport is busy, hands them over as one, keeps order, and tells when
the side it writes to fell behind and caught up."""

from __future__ import annotations

from proxy.connection.outbox import GATHER_BELOW_BYTES, Outbox


class SlowTransport:
    """Takes ``sendable`` bytes at once; keeps the rest as the pieces it was given, as uvloop does, and calls the
    outbox's ``busy``/``drained`` as uvloop calls its protocol's ``pause_writing``/``resume_writing`` with high and
    low marks of 1 and 0."""

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        self.sendable = 1 << 30
        self.sent = bytearray()
        self.held: list[bytes] = []
        self.limits: tuple[int, int] | None = None
        self.closing = False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        self.limits = (high, low)

    def get_write_buffer_size(self) -> int:
        return sum(map(len, self.held))

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        if not self.held:
            taken = min(len(data), self.sendable)
            self.sendable -= taken
            self.sent += data[:taken]
            data = data[taken:]
        if data:
            self.held.append(data)
            assert self.outbox is not None
            self.outbox.busy()

    def writelines(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.write(piece)

    def send_everything(self) -> None:
        for piece in self.held:
            self.sent += piece
        self.held.clear()
        self.sendable = 1 << 30
        assert self.outbox is not None
        self.outbox.drained()


class Events:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def fell_behind(self) -> None:
        self.seen.append("behind")

    def caught_up(self) -> None:
        self.seen.append("caught up")


def outbox(high_bytes: int = 1 << 20) -> tuple[Outbox, SlowTransport, Events]:
    transport, events = SlowTransport(), Events()
    transport.outbox = box = Outbox(transport, high_bytes, events.fell_behind, events.caught_up)  # type: ignore[arg-type]
    return box, transport, events


def test_the_transport_is_told_to_pause_as_soon_as_it_holds_anything() -> None:
    _, transport, _ = outbox()
    assert transport.limits == (1, 0)


def test_pieces_go_straight_to_an_idle_transport() -> None:
    box, transport, _ = outbox()
    box.write(b"a")
    box.writelines([b"b", memoryview(b"cd")])
    assert transport.sent == b"abcd" and not transport.held


def test_small_pieces_written_while_the_transport_is_busy_become_one() -> None:
    box, transport, _ = outbox()
    transport.sendable = 3
    box.write(b"first")  # 2 bytes left unsent: busy
    for number in range(1000):
        box.write(b"%04d" % number)
    assert transport.held == [b"st"], "the small pieces wait gathered, not one object each in the transport"
    assert box.queued_bytes() == 2 + 4000
    transport.send_everything()
    assert transport.held == [] and transport.sent == b"first" + b"".join(b"%04d" % n for n in range(1000))


def test_gathered_bytes_are_handed_over_at_the_gathering_size_and_before_a_large_piece() -> None:
    box, transport, _ = outbox()
    transport.sendable = 0
    box.write(b"x")  # busy
    box.write(b"s" * (GATHER_BELOW_BYTES - 1))
    box.write(b"t")  # the gathered reach the gathering size: handed over as one
    box.write(b"u")
    box.write(b"L" * GATHER_BELOW_BYTES)  # a large piece goes as it is, after what was gathered
    assert transport.held == [b"x", b"s" * (GATHER_BELOW_BYTES - 1) + b"t", b"u", b"L" * GATHER_BELOW_BYTES]


def test_falls_behind_at_the_mark_and_catches_up_once_drained() -> None:
    box, transport, events = outbox(high_bytes=100)
    transport.sendable = 0
    box.write(b"x" * 60)
    assert events.seen == [] and not box.behind
    box.write(b"y" * 40)  # 100 queued, 40 of them gathered
    assert events.seen == ["behind"] and box.behind
    box.write(b"z")
    assert events.seen == ["behind"], "told once"
    transport.send_everything()  # the gathered 41 are handed over and sent at once
    assert events.seen == ["behind", "caught up"] and not box.behind
    assert transport.sent == b"x" * 60 + b"y" * 40 + b"z"


def test_stays_behind_while_what_was_gathered_is_more_than_a_quarter_of_the_mark() -> None:
    box, transport, events = outbox(high_bytes=100)
    transport.sendable = 0
    box.write(b"x" * 10)
    box.write(b"y" * 95)  # behind: 105 queued, 95 gathered
    transport.held, transport.sendable = [], 0  # the transport sent its 10 and takes nothing more for now
    transport.outbox.drained()  # type: ignore[union-attr]
    assert transport.held == [b"y" * 95] and events.seen == ["behind"], "95 handed over, still more than 25"
    transport.send_everything()
    assert events.seen == ["behind", "caught up"]


def test_closing_hands_over_what_was_gathered_and_forgets_the_callbacks() -> None:
    box, transport, events = outbox(high_bytes=10)
    transport.sendable = 0
    box.write(b"x")
    box.write(b"y")
    box.close()
    assert transport.held == [b"x", b"y"]
    box.write(b"z" * 20)
    assert events.seen == [], "nobody is told anything once closed"
