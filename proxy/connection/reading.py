"""How much one read of a connection takes, and when a frame is cut through or spliced rather than read whole."""

CUT_THROUGH_AFTER_BYTES = 64 * 1024
"""A request frame still incomplete after this many bytes is forwarded as it arrives: holding a
megabyte-sized produce request until its last byte adds a loopback transfer to every request. The
same holds for a Fetch response, the one large response whose only rewrite (its throttle) is at its
start."""


SPLICE_AFTER_BYTES = 64 * 1024
"""The rest of a frame cut through (a request, or a Fetch response) is spliced (``splice``) when at least
this much is still to come: starting a splice costs a pipe and two duplicated descriptors."""

READ_AFTER_SPLICED_RECORDS_BYTES = 1024
"""What a read takes right after a request's records were spliced: the structure up to the next batch's
header (a partition's index and size, a topic's name) fits."""

READ_BYTES = 256 * 1024
"""The most one read takes from a client (uvloop's own read size)."""


def read_bytes_for(buffer_high: int) -> int:
    """What one read takes at most for a connection whose sides may each hold ``buffer_high`` bytes: a
    read is held whole while its frames wait, so it must stay small beside the share."""
    return max(4096, min(READ_BYTES, buffer_high // 4))
