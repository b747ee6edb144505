"""Rewritten answers remembered by the bytes the cluster sent, within a bound."""

from __future__ import annotations

from proxy.cluster.rewrites import RewriteMemo


def test_a_rewrite_is_made_once_for_the_same_bytes_and_kept_within_its_bound() -> None:
    made: list[bytes] = []

    def rewrite(body: bytes) -> bytes:
        made.append(body)
        return body.upper()

    memo = RewriteMemo(max_bytes=40)
    assert memo.rewritten((3, 12, b"abcdefghij"), lambda: rewrite(b"abcdefghij")) == b"ABCDEFGHIJ"
    assert memo.rewritten((3, 12, b"abcdefghij"), lambda: rewrite(b"abcdefghij")) == b"ABCDEFGHIJ"
    assert made == [b"abcdefghij"]
    assert memo.rewritten((3, 11, b"abcdefghij"), lambda: rewrite(b"abcdefghij")) == b"ABCDEFGHIJ"
    assert len(made) == 2  # another version is another answer
    memo.rewritten((3, 12, b"0123456789"), lambda: rewrite(b"0123456789"))  # 60 bytes kept: all forgotten first
    memo.rewritten((3, 12, b"abcdefghij"), lambda: rewrite(b"abcdefghij"))
    assert len(made) == 4


def test_an_answer_left_as_it_is_is_remembered_and_one_larger_than_the_bound_is_not() -> None:
    calls = 0

    def unchanged() -> None:
        nonlocal calls
        calls += 1

    memo = RewriteMemo(max_bytes=8)
    memo.rewritten((18, 3, b"abc"), unchanged)
    memo.rewritten((18, 3, b"abc"), unchanged)
    assert calls == 1
    memo.rewritten((18, 3, b"0123456789"), unchanged)
    memo.rewritten((18, 3, b"0123456789"), unchanged)
    assert calls == 3
