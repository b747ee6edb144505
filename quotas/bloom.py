"""Bloom filters hashed with MurmurHash3, and the time-controlled filters of KIP-936.

``TimeControlledBloomFilter`` remembers, per user, which producer IDs were seen in roughly the
last window (one ``producer.id.quota.window.size.seconds``): new IDs go into the newest filter; a
new filter starts every half window; a filter is dropped 1.5 windows after it started, so an ID
stays known for at least one window. Each filter is sized for what the user may add in its half
window at its quota (the caller passes that capacity); a user far over its quota fills a filter
early, and the next one in the same half window is twice as large at half the false-positive
rate, so the filters' combined false-positive rate stays below twice the target (Almeida et al.,
"Scalable Bloom Filters").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from struct import Struct

import mmh3

_INT64 = Struct(">q")
_SIDECAR_HEADER = Struct(">ii")

Probe = tuple[int, int]
"""The two 64-bit halves of an item's MurmurHash3 x64-128: hashed once, reduced by each filter."""


def probe(item: int) -> Probe:
    first, second = mmh3.hash64(_INT64.pack(item), signed=False)
    return first, second


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
    # the unreduced (h1, h2) pair: filters of any shape share it, so hashing happens once per lookup.
    def add(self, item: int) -> None:
        self.add_probe(probe(item))

    def __contains__(self, item: int) -> bool:
        return self.contains_probe(probe(item))

    def add_probe(self, item_probe: Probe) -> None:
        bits, m = self._bits, self.bit_count
        position, step = item_probe[0] % m, item_probe[1] % m
        for _ in range(self.hash_count):
            bits[position >> 3] |= 1 << (position & 7)
            position += step
            if position >= m:
                position -= m

    def contains_probe(self, item_probe: Probe) -> bool:
        bits, m = self._bits, self.bit_count
        position, step = item_probe[0] % m, item_probe[1] % m
        for _ in range(self.hash_count):
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
            position += step
            if position >= m:
                position -= m
        return True

    def to_bytes(self) -> bytes:
        """The ledger's ``.bloom`` sidecar layout (``allocator.ledger``): int32 bit count, int32 hash count, then
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
        words = data[_SIDECAR_HEADER.size:]
        if len(words) != (bit_count + 63) // 64 * 8:  # checked before the bit count sizes an allocation
            raise ValueError(f"Bloom filter of {bit_count} bits has {len(words)} bytes of words")
        bloom = cls(bit_count, hash_count)
        padded = b"".join(words[i:i + 8][::-1] for i in range(0, len(words), 8))
        bloom._bits[:] = padded[:len(bloom._bits)]
        return bloom

    def approximate_count(self) -> float:
        """Estimated items added: -m/k ln(1 - X/m) for X bits set (Swamidass & Baldi)."""
        set_bits = sum(byte.bit_count() for byte in self._bits)
        if set_bits >= self.bit_count:
            return math.inf
        return -self.bit_count / self.hash_count * math.log(1 - set_bits / self.bit_count)


class _TimedFilter:
    """One filter of a user: when it started, how many IDs it may take, how many it has."""

    __slots__ = ("started_ms", "bloom", "capacity", "false_positive_rate", "count")

    def __init__(self, started_ms: int, capacity: int, false_positive_rate: float) -> None:
        self.started_ms = started_ms
        self.bloom = BloomFilter.for_capacity(capacity, false_positive_rate)
        self.capacity = capacity
        self.false_positive_rate = false_positive_rate
        self.count = 0

    @property
    def full(self) -> bool:
        return self.count >= self.capacity

    def add(self, item_probe: Probe) -> None:
        self.bloom.add_probe(item_probe)
        self.count += 1


class TimeControlledBloomFilter:
    """Per-user rotating Bloom filters of producer IDs."""

    __slots__ = ("_window_ms", "_false_positive_rate", "_by_user")

    def __init__(self, window_ms: int, false_positive_rate: float) -> None:
        if window_ms < 2 or not 0 < false_positive_rate < 1:
            raise ValueError(f"need a window of at least 2 ms and 0 < rate < 1, got {window_ms}, "
                             f"{false_positive_rate}")
        self._window_ms = window_ms
        self._false_positive_rate = false_positive_rate
        # user -> filters, oldest first; users ordered by their newest filter's start
        self._by_user: OrderedDict[str, list[_TimedFilter]] = OrderedDict()

    def users(self) -> int:
        return len(self._by_user)

    def filters(self, user: str) -> int:
        return len(self._by_user.get(user, ()))

    def size_bytes(self, user: str) -> int:
        return sum(timed.bloom.size_bytes for timed in self._by_user.get(user, ()))

    @staticmethod
    def probe(pid: int) -> Probe:
        """Hash ``pid`` once for ``might_contain`` and ``add``."""
        return probe(pid)

    def might_contain(self, user: str, pid_probe: Probe, now_ms: int) -> bool:
        return any(timed.bloom.contains_probe(pid_probe) for timed in self._live_filters(user, now_ms))

    def add(self, user: str, pid_probe: Probe, now_ms: int, capacity: int) -> None:
        """Remember ``pid_probe`` for ``user``; ``capacity``: the IDs a new filter is sized for."""
        filters = self._live_filters(user, now_ms)
        newest = filters[-1] if filters else None
        if newest is None or now_ms - newest.started_ms >= self._window_ms // 2:
            newest = self._append(user, filters, _TimedFilter(now_ms, capacity, self._false_positive_rate))
        elif newest.full:  # over its quota within half a window: a larger, tighter filter, dropped as early
            newest = self._append(user, filters, _TimedFilter(newest.started_ms, newest.capacity * 2,
                                                              newest.false_positive_rate / 2))
        newest.add(pid_probe)

    def _append(self, user: str, filters: list[_TimedFilter], timed: _TimedFilter) -> _TimedFilter:
        filters.append(timed)
        self._by_user[user] = filters
        self._by_user.move_to_end(user)
        return timed

    def expire(self, now_ms: int) -> None:
        """Drop filters older than 1.5 windows and users left with none (cheap: oldest first)."""
        while self._by_user:
            user, filters = next(iter(self._by_user.items()))
            self._drop_old(filters, now_ms)
            if filters:
                return
            del self._by_user[user]

    def _live_filters(self, user: str, now_ms: int) -> list[_TimedFilter]:
        filters = self._by_user.get(user)
        if filters is None:
            return []
        self._drop_old(filters, now_ms)
        if not filters:
            del self._by_user[user]
        return filters

    def _drop_old(self, filters: list[_TimedFilter], now_ms: int) -> None:
        lifetime_ms = self._window_ms * 3 // 2
        while filters and now_ms - filters[0].started_ms >= lifetime_ms:
            filters.pop(0)
