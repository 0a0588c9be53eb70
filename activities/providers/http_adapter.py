"""The HTTP exchange every adapter shares: send, map failures to typed errors, parse.

One place decides what a transport error, an error status or an unexpected reply shape means,
so the OpenAI and Anthropic adapters only build bodies and read replies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from capstan.activities.providers.base import ProviderReply
from capstan.activities.providers.errors import error_for_response, error_for_transport, malformed
from capstan.activities.providers.profiles import Profile
from capstan.activities.providers.token_budget import token_budget

__all__ = ["HttpAdapter"]

ReadReply = Callable[[httpx.Response, bool], Awaitable[ProviderReply]]


class HttpAdapter:
    """Holds the profile and the shared httpx client; `exchange` does one request."""

    def __init__(self, profile: Profile, http: httpx.AsyncClient) -> None:
        self.profile = profile
        self.http = http

    @property
    def secrets(self) -> tuple[str, ...]:
        key = self.profile.api_key
        return (key.get_secret_value(),) if key else ()

    async def exchange(
        self, url: str, body: dict[str, Any] | bytes, headers: dict[str, str], read: ReadReply
    ) -> ProviderReply:
        """POST `body` (JSON, or already encoded JSON); `read(response, streamed)` turns a 2xx
        response into a reply."""
        if isinstance(body, bytes):
            headers = {"content-type": "application/json", **headers}
            request = self.http.build_request(
                "POST", url, content=body, headers=headers, timeout=self.profile.request_timeout
            )
        else:
            request = self.http.build_request(
                "POST", url, json=body, headers=headers, timeout=self.profile.request_timeout
            )
        try:
            response = await self.http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise error_for_transport(exc, self.secrets) from None
        try:
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", errors="replace")
                raise error_for_response(response, text, self.secrets)
            streamed = "text/event-stream" in response.headers.get("content-type", "")
            try:
                reply = await read(response, streamed)
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
                # JSON errors are ValueErrors; the rest are reply shapes we did not expect
                raise malformed(f"{type(exc).__name__}: {exc}") from None
            budget = token_budget(response.headers)
            if budget is None:
                return reply
            return reply.model_copy(
                update={"tokens_remaining": budget.remaining, "tokens_reset": budget.reset_seconds}
            )
        except httpx.TransportError as exc:
            raise error_for_transport(exc, self.secrets) from None
        finally:
            await response.aclose()
