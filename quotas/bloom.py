"""Bloom filters hashed with MurmurHash3, and the time-controlled pair of SPEC §5 (KIP-936).

``TimeControlledBloomFilter`` remembers, per user, which producer IDs were seen in roughly the
last window: new IDs go into the newest filter; a new filter starts every half window; a filter
is dropped 1.5 windows after it started, so an ID stays known for at least one window.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from struct import Struct

import mmh3

_INT64 = Struct(">q")
_SIDECAR_HEADER = Struct(">ii")

Probe = tuple[int, int]


def probe(item: int, bit_count: int) -> Probe:
    first, second = mmh3.hash64(_INT64.pack(item), signed=False)
    return first % bit_count, second % bit_count


class BloomFilter:
    __slots__ = ("bit_count", "hash_count", "_bits")

    def __init__(self, bit_count: int, hash_count: int) -> None:
        if bit_count < 8 or hash_count < 1:
            raise ValueError(f"need at least 8 bits and 1 hash, got {bit_count} bits and {hash_count} hashes")
        self.bit_count = bit_count
        self.hash_count = hash_count
        self._bits = bytearray((bit_count + 7) // 8)

    @classmethod
    def for_capacity(cls, expected_items: int, false_positive_rate: float) -> BloomFilter:
        """m = -n ln p / (ln 2)^2 bits and k = m/n ln 2 hashes: the smallest filter for (n, p)."""
        if expected_items < 1 or not 0 < false_positive_rate < 1:
            raise ValueError(f"expected_items must be >= 1 and 0 < rate < 1, got {expected_items}, "
                             f"{false_positive_rate}")
        bits = math.ceil(-expected_items * math.log(false_positive_rate) / math.log(2) ** 2)
        hashes = max(1, round(bits / expected_items * math.log(2)))
        return cls(max(bits, 8), hashes)

    @property
    def size_bytes(self) -> int:
        return len(self._bits)

    # Kirsch-Mitzenmacher: position i = (h1 + i * h2) mod m from the two 64-bit halves of one
    # MurmurHash3 x64-128, both reduced mod m first so the loops stay in small ints. A probe is
    # that (h1, h2) pair: filters of one shape share it, so hashing happens once per lookup.
    def add(self, item: int) -> None:
        self.add_probe(probe(item, self.bit_count))

    def __contains__(self, item: int) -> bool:
        return self.contains_probe(probe(item, self.bit_count))

    def add_probe(self, item_probe: Probe) -> None:
        bits, m = self._bits, self.bit_count
        position, step = item_probe
        for _ in range(self.hash_count):
            bits[position >> 3] |= 1 << (position & 7)
            position += step
            if position >= m:
                position -= m

    def contains_probe(self, item_probe: Probe) -> bool:
        bits, m = self._bits, self.bit_count
        position, step = item_probe
        for _ in range(self.hash_count):
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
            position += step
            if position >= m:
                position -= m
        return True

    def to_bytes(self) -> bytes:
        """The ledger's ``.bloom`` sidecar layout (SPEC §6): int32 bit count, int32 hash count, then
        the bit map as big-endian int64 words, bit i being bit i % 64 of word i // 64."""
        padded = bytes(self._bits) + bytes(-len(self._bits) % 8)
        words = b"".join(padded[i:i + 8][::-1] for i in range(0, len(padded), 8))
        return _SIDECAR_HEADER.pack(self.bit_count, self.hash_count) + words

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """Raises ValueError when ``data`` is not a whole filter in ``to_bytes`` layout."""
        if len(data) < _SIDECAR_HEADER.size:
            raise ValueError("Bloom filter data shorter than its header")
        bit_count, hash_count = _SIDECAR_HEADER.unpack_from(data)
        bloom = cls(bit_count, hash_count)
        words = data[_SIDECAR_HEADER.size:]
        if len(words) != (len(bloom._bits) + 7) // 8 * 8:
            raise ValueError(f"Bloom filter of {bit_count} bits has {len(words)} bytes of words")
        padded = b"".join(words[i:i + 8][::-1] for i in range(0, len(words), 8))
        bloom._bits[:] = padded[:len(bloom._bits)]
        return bloom

    def approximate_count(self) -> float:
        """Estimated items added: -m/k ln(1 - X/m) for X bits set (Swamidass & Baldi)."""
        set_bits = sum(byte.bit_count() for byte in self._bits)
        if set_bits >= self.bit_count:
            return math.inf
        return -self.bit_count / self.hash_count * math.log(1 - set_bits / self.bit_count)


class TimeControlledBloomFilter:
    """Per-user rotating Bloom filters of producer IDs (all users of one quota share a shape)."""

    __slots__ = ("_window_ms", "_expected_items", "_false_positive_rate", "_bit_count", "_by_user")

    def __init__(self, window_ms: int, expected_items: int, false_positive_rate: float) -> None:
        self._window_ms = window_ms
        self._expected_items = expected_items
        self._false_positive_rate = false_positive_rate
        self._bit_count = BloomFilter.for_capacity(expected_items, false_positive_rate).bit_count
        # user -> [(started_ms, filter)], oldest first; users ordered by their newest filter's start
        self._by_user: OrderedDict[str, list[tuple[int, BloomFilter]]] = OrderedDict()

    def users(self) -> int:
        return len(self._by_user)

    def filters(self, user: str) -> int:
        return len(self._by_user.get(user, ()))

    def probe(self, pid: int) -> Probe:
        """Hash ``pid`` once for ``might_contain`` and ``add`` (every filter here has one shape)."""
        return probe(pid, self._bit_count)

    def might_contain(self, user: str, pid_probe: Probe, now_ms: int) -> bool:
        return any(bloom.contains_probe(pid_probe) for _, bloom in self._live_filters(user, now_ms))

    def add(self, user: str, pid_probe: Probe, now_ms: int) -> None:
        filters = self._live_filters(user, now_ms)
        if not filters or now_ms - filters[-1][0] >= self._window_ms // 2:
            filters.append((now_ms, BloomFilter.for_capacity(self._expected_items, self._false_positive_rate)))
            self._by_user[user] = filters
            self._by_user.move_to_end(user)
        filters[-1][1].add_probe(pid_probe)

    def expire(self, now_ms: int) -> None:
        """Drop filters older than 1.5 windows and users left with none (cheap: oldest first)."""
        while self._by_user:
            user, filters = next(iter(self._by_user.items()))
            self._drop_old(filters, now_ms)
            if filters:
                return
            del self._by_user[user]

    def _live_filters(self, user: str, now_ms: int) -> list[tuple[int, BloomFilter]]:
        filters = self._by_user.get(user)
        if filters is None:
            return []
        self._drop_old(filters, now_ms)
        if not filters:
            del self._by_user[user]
        return filters

    def _drop_old(self, filters: list[tuple[int, BloomFilter]], now_ms: int) -> None:
        lifetime_ms = self._window_ms * 3 // 2
        while filters and now_ms - filters[0][0] >= lifetime_ms:
            filters.pop(0)
