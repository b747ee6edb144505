from __future__ import annotations

import asyncio
import base64
import threading

import pytest

from proxy.cluster import upstream
from proxy.cluster.upstream import SaltedPasswords
from proxy.security.sasl_messages import AuthenticationFailed, ScramClient, ScramSalt, salted_password
from proxy.settings.config import UpstreamSasl

SASL = UpstreamSasl("SCRAM-SHA-512", "proxy", "proxy-secret")


def server_first(client: ScramClient, iterations: int, salt: bytes = b"salt") -> bytes:
    nonce = client.first_message().decode().rpartition("r=")[2]
    return f"r={nonce}server,s={base64.b64encode(salt).decode()},i={iterations}".encode()


@pytest.mark.parametrize("iterations", [4095, 16385, 10**9])
def test_an_iteration_count_outside_kafkas_bounds_is_refused_before_any_hashing(iterations: int) -> None:
    client = ScramClient("SCRAM-SHA-512", "proxy", "proxy-secret")
    with pytest.raises(AuthenticationFailed, match=f"asks for {iterations} SCRAM iterations, outside Kafka's "
                                                   "4096-16384 for SCRAM-SHA-512"):
        client.server_salt(server_first(client, iterations))


def test_the_bounds_themselves_are_kafkas_and_accepted() -> None:
    client = ScramClient("SCRAM-SHA-512", "proxy", "proxy-secret")
    assert client.server_salt(server_first(client, 4096)) == ScramSalt(b"salt", 4096)
    assert client.server_salt(server_first(client, 16384)) == ScramSalt(b"salt", 16384)


def test_logins_waiting_for_one_salt_share_one_computation_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []

    def counted(mechanism: str, password: str, salt: ScramSalt) -> bytes:
        threads.append(threading.get_ident())
        return salted_password(mechanism, password, salt)

    monkeypatch.setattr(upstream, "salted_password", counted)
    cache = SaltedPasswords()
    salt = ScramSalt(b"salt", 4096)

    async def logins() -> list[bytes]:
        first = await asyncio.gather(*(cache.get(SASL, salt) for _ in range(20)))
        return [*first, await cache.get(SASL, salt)]

    results = asyncio.run(logins())
    assert len(threads) == 1 and threads[0] != threading.get_ident()
    assert set(results) == {salted_password(SASL.mechanism, SASL.password, salt)}
    asyncio.run(cache.get(SASL, ScramSalt(b"other salt", 4096)))  # a new salt is computed
    assert len(threads) == 2


def test_the_remembered_salts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[ScramSalt] = []
    monkeypatch.setattr(upstream, "salted_password", lambda mechanism, password, salt: computed.append(salt) or b"")
    cache = SaltedPasswords()
    salts = [ScramSalt(index.to_bytes(4, "big"), 4096) for index in range(SaltedPasswords.CAPACITY * 3)]

    async def logins(*wanted: ScramSalt) -> None:
        for salt in wanted:
            await cache.get(SASL, salt)

    asyncio.run(logins(*salts))
    asyncio.run(logins(salts[-1], salts[-SaltedPasswords.CAPACITY]))  # the newest ones are still known
    assert computed == salts
    asyncio.run(logins(salts[0]))  # the oldest was dropped
    assert computed == [*salts, salts[0]]
