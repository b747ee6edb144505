"""Whose a delegation token is, for logins the proxy inspects (``sasl-mode = "inspect"``).

A SCRAM login with ``tokenauth=true`` names a delegation token's id, not a user; the cluster makes the token's owner
the connection's principal. The proxy learns the owner as Kafka's own tools do, with DescribeDelegationToken under its
own login (``[upstream-sasl]``: Kafka answers it only on an authenticated channel, and lists only the tokens that
login may describe), and remembers it until the token's expiry (a renewal moves the expiry: the token is described
again once the one remembered has passed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from protocol.apis import Api
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess, request_any
from proxy.security.sasl_inspect import TokenOwnerUnknown
from proxy.settings.config import HostPort

log = logging.getLogger(__name__)

_DESCRIBE_VERSION = 3
_WHY = {
    61: "the cluster has delegation tokens disabled (DELEGATION_TOKEN_AUTH_DISABLED)",
    64: "the cluster does not let the proxy's own login describe tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: it "
        "must be a SASL login, [upstream-sasl], not itself a token)",
}


class TokenOwners:
    """Token id -> owner, from the cluster. One DescribeDelegationToken is in flight at a time, whoever asks: a flood
    of logins naming made-up tokens costs the cluster one request per round trip, not one per login."""

    def __init__(self, bootstrap: tuple[HostPort, ...], access: UpstreamAccess, timeout_s: float,
                 max_frame_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self._bootstrap = bootstrap
        self._access = access
        self._timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._clock = clock
        self._owners: dict[str, tuple[str, int]] = {}
        """Token id -> (owner's name, expiry in ms), from the latest answer."""
        self._describing: asyncio.Task[None] | None = None

    async def owner(self, token_id: str) -> str:
        """The owner's name (the principal's, without ``User:``), or TokenOwnerUnknown saying why not."""
        owner = self._known(token_id)
        if owner is None and self._describing is not None:  # an answer on its way may name it
            await asyncio.shield(self._describing)
            owner = self._known(token_id)
        if owner is None:  # asked after the token was made: an answer from before could not name it
            if self._describing is None:
                self._describing = asyncio.get_running_loop().create_task(self._describe())
            await asyncio.shield(self._describing)
            owner = self._known(token_id)
        if owner is None:
            raise TokenOwnerUnknown(f"no token {token_id!r} among those the proxy's own login may describe (it needs "
                                    "DESCRIBE on the token, or to be a super user)")
        return owner

    def _known(self, token_id: str) -> str | None:
        known = self._owners.get(token_id)
        if known is None or known[1] <= self._clock() * 1000:
            return None
        return known[0]

    async def _describe(self) -> None:
        try:
            answer = await request_any(self._bootstrap, Api.DESCRIBE_DELEGATION_TOKEN, _DESCRIBE_VERSION,
                                       {"owners": None}, self._timeout_s, self._max_frame_bytes, self._access)
        except UPSTREAM_ERRORS as error:
            raise TokenOwnerUnknown(f"DescribeDelegationToken failed: {error or type(error).__name__}") from None
        finally:
            self._describing = None
        if answer.error_code:
            raise TokenOwnerUnknown(_WHY.get(answer.error_code, f"DescribeDelegationToken answered error "
                                                                f"{answer.error_code}"))
        self._owners = {token.token_id: (token.principal_name, token.expiry_timestamp) for token in answer.tokens}
