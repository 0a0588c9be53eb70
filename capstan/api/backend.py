"""What every route needs: the Temporal client (connected on first use), the tenant's view of
runs, and the per-token limit on writes.

The server starts while Temporal is away and answers 503 until it is back: the connection is
made by the first request that needs it and kept. Nothing about runs is kept here: any number
of servers can run behind a load balancer (the write limit is per server process).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from fastapi import Depends, Request

from capstan.api.auth import Principal, Scope, require
from capstan.api.errors import ApiError
from capstan.api.tenancy import Tenancy, TenantIndex
from capstan.client.runs import CapstanClient
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings
from capstan.runtime.temporal_connection import TemporalConnectError

__all__ = ["CONNECT_TIMEOUT", "Backend", "WriteLimiter", "api_settings", "tenancy", "writer"]

CONNECT_TIMEOUT = 5.0


class Backend:
    """The server's one `CapstanClient`, connected on first use."""

    def __init__(self, settings: Settings, client: CapstanClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._lock = asyncio.Lock()
        self.tenant_index = TenantIndex()  # asked once per process, not per request

    async def client(self) -> CapstanClient:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(
                        CapstanClient.connect(self.settings), CONNECT_TIMEOUT
                    )
                except TimeoutError:
                    raise TemporalConnectError(
                        f"no Temporal server answers at {self.settings.address}", unreachable=True
                    ) from None
            return self._client


def api_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.api
    return settings


async def tenancy(request: Request) -> Tenancy:
    backend: Backend = request.app.state.backend
    return Tenancy(await backend.client(), backend.tenant_index)


class WriteLimiter:
    """A token bucket per principal: `per_minute` writes, refilled continuously."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self.clock = clock
        self._buckets: dict[Principal, tuple[float, float]] = {}

    def take(self, principal: Principal) -> None:
        now = self.clock()
        level, since = self._buckets.get(principal, (self.capacity, now))
        level = min(self.capacity, level + (now - since) * self.rate)
        if level < 1.0:
            wait = math.ceil((1.0 - level) / self.rate)
            raise ApiError(
                429,
                "rate_limited",
                f"too many writes with this token; retry in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        self._buckets[principal] = (level - 1.0, now)


def writer(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """A dependency for routes that write (signals, starts): the scope, then the rate limit."""

    caller = Depends(require(scope))  # a closure: string annotations cannot name it

    async def dependency(request: Request, principal: Principal = caller) -> Principal:
        limiter: WriteLimiter = request.app.state.limiter
        limiter.take(principal)
        return principal

    return dependency
