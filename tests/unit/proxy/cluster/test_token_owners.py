"""Whose a delegation token is, learnt from DescribeDelegationToken answers (the cluster replaced by its answers)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cluster import token_owners
from proxy.cluster.token_owners import TokenOwners
from proxy.cluster.upstream import UpstreamAccess
from proxy.security.sasl_inspect import TokenOwnerUnknown
from proxy.settings.config import HostPort

NOW_S = 1_800_000_000


def token(token_id: str, owner: str, expiry_s: float) -> SimpleNamespace:
    return SimpleNamespace(token_id=token_id, principal_type="User", principal_name=owner,
                           expiry_timestamp=int(expiry_s * 1000))


class Cluster:
    """Answers DescribeDelegationToken with ``tokens`` (or ``error_code``), after a turn of the loop."""

    def __init__(self, *tokens: SimpleNamespace, error_code: int = 0) -> None:
        self.tokens = list(tokens)
        self.error_code = error_code
        self.asked = 0

    async def request_any(self, bootstrap: Any, api_key: int, version: int, message: Any, *rest: Any) -> Any:
        assert (api_key, version, message) == (41, 3, {"owners": None})
        self.asked += 1
        await asyncio.sleep(0)
        return SimpleNamespace(error_code=self.error_code, tokens=list(self.tokens))


def owners_of(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> TokenOwners:
    monkeypatch.setattr(token_owners, "request_any", cluster.request_any)
    return TokenOwners((HostPort("kafka", 9092),), UpstreamAccess(), 5.0, 1 << 20, clock=lambda: clock[0])


def test_logins_at_once_share_one_question_and_the_answer_lasts_the_tokens_life(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [float(NOW_S)]
    cluster = Cluster(token("t-1", "alice", NOW_S + 60), token("t-2", "bob", NOW_S + 3600))
    owners = owners_of(cluster, monkeypatch, clock)

    async def scenario() -> None:
        assert await asyncio.gather(owners.owner("t-1"), owners.owner("t-2"), owners.owner("t-1")) == \
            ["alice", "bob", "alice"]
        assert cluster.asked == 1
        assert await owners.owner("t-2") == "bob" and cluster.asked == 1  # remembered
        clock[0] = NOW_S + 61  # t-1's expiry passed: renewed since, as the cluster now says
        cluster.tokens[0] = token("t-1", "alice", NOW_S + 7200)
        assert await owners.owner("t-1") == "alice" and cluster.asked == 2
        with pytest.raises(TokenOwnerUnknown, match="no token 't-9'"):
            await owners.owner("t-9")
        assert cluster.asked == 3

    asyncio.run(scenario())


@pytest.mark.parametrize(("error_code", "why"), [(61, "disabled"), (64, r"\[upstream-sasl\]"), (29, "error 29")])
def test_a_refusal_of_the_cluster_says_why(error_code: int, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    owners = owners_of(Cluster(error_code=error_code), monkeypatch, [float(NOW_S)])
    with pytest.raises(TokenOwnerUnknown, match=why):
        asyncio.run(owners.owner("t-1"))


def test_a_cluster_that_cannot_be_reached_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable(*_: Any) -> Any:
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(token_owners, "request_any", unreachable)
    owners = TokenOwners((HostPort("kafka", 9092),), UpstreamAccess(), 5.0, 1 << 20)
    with pytest.raises(TokenOwnerUnknown, match="DescribeDelegationToken failed: connection refused"):
        asyncio.run(owners.owner("t-1"))
