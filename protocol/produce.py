"""Reading the few Produce request fields the proxy routes on, straight from the frame."""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

from protocol.errors import ProtocolError
from protocol.header import RequestHeader, read_uvarint

PRODUCE_KEY = 0
FIRST_FLEXIBLE_PRODUCE_VERSION = 9
_INT16 = Struct(">h")


def produce_acks(frame: bytes | memoryview, header: RequestHeader) -> int:
    """``acks`` of a Produce request; ``frame`` excludes the size prefix.

    acks=0 requests get no response, so the proxy must not wait for one.
    """
    pos = header.length
    version = header.api_version
    try:
        if version >= 3:  # transactional_id precedes acks from v3 on
            if version >= FIRST_FLEXIBLE_PRODUCE_VERSION:
                length_plus_one, pos = read_uvarint(frame, pos)
                pos += max(length_plus_one - 1, 0)
            else:
                (length,) = _INT16.unpack_from(frame, pos)
                pos += 2 + max(length, 0)
        (acks,) = _INT16.unpack_from(frame, pos)
    except (ProtocolError, StructError) as error:
        raise ProtocolError("Produce request truncated before acks", api_key=PRODUCE_KEY,
                            api_version=version, offset=pos) from error
    return int(acks)
