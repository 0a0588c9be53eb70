"""The `notify_request` activity: post an opened request to the worker's webhooks.

The workflow starts it and never waits (`capstan.workflows.webhook_starts`), on the deliveries'
own task queue, served beside the run's by `capstan.activities.deliveries.DeliveryWorker` (its
own slots and connections: a hanging hook never holds up a model or tool call). Retries are
Temporal's (`capstan.core.activity_table`): a hook that is down, times out, answers 5xx, 408 or
429 is retried with backoff (honouring `Retry-After`); a hook that refuses the request (any
other 4xx) or whose URL or secret is missing or unusable is not. The hooks that took the request
are kept in the heartbeat details, so a retry posts only to the others. Each post has one
deadline (the hook's `timeout`: connect, write and read) and reads a few KiB of the answer at
most.

Secrets and hook URLs are read here, from the worker's environment or files, per attempt
(`capstan.runtime.webhooks`); they are never in the input. Log lines and errors name the hook
and its host only, and pass a `Scrubber` of the hook's secret and URL tokens (user, password,
path, query) all the same, as do the HTTP libraries' records made during a post. It must never
raise anything but an `ApplicationError` with such a message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from capstan.activities.deliveries import (
    Answer,
    DeliveryWorker,
    delivery_transport,
    post,
    scrubbing,
)
from capstan.activities.providers.secrets import Scrubber
from capstan.activities.webhook_bodies import event_name, inbox_link, json_body, slack_body
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.notifications import NotifyInput, NotifyResult
from capstan.runtime.blobstore import BlobError, ContentStore
from capstan.runtime.config import ConfigError
from capstan.runtime.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Hook,
    WebhookConfig,
    sign,
)

__all__ = ["NotifyActivities"]

log = logging.getLogger("capstan.activities.notify_request")

#: the longest `Retry-After` honoured (the activity's retry policy caps the rest)
MAX_RETRY_AFTER = 60.0


@dataclass
class _Attempt:
    """What one attempt achieved, hook by hook."""

    delivered: set[str]
    retryable: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    retry_after: float | None = None


class NotifyActivities:
    """`notify_request`, with the worker's hooks, environment and blob store, and the
    deliveries' own connection pool (`transport`: a test may pass a mock)."""

    def __init__(
        self,
        config: WebhookConfig,
        env: Mapping[str, str],
        content: ContentStore,
        inbox_url: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.env = env
        self.content = content
        self.inbox_url = inbox_url
        self.transport = transport if transport is not None else delivery_transport()

    def plugin(self) -> DeliveryWorker:
        """The worker plugin that serves this activity on the deliveries' own task queue."""
        return DeliveryWorker(self.notify_request, self.transport)

    @activity.defn(name=ActivityName.NOTIFY_REQUEST.value)
    async def notify_request(self, item: NotifyInput) -> NotifyResult:
        hooks = [h for h in self.config.hooks if item.kind in h.events]
        if not hooks:
            return NotifyResult()
        with _scrubbed(hooks, self.env).exit():  # whatever escapes, it names no token
            attempt = _Attempt(delivered=_delivered_before())
            arguments = await self._arguments(item)
            # in parallel: one slow hook must not eat the others' share of the start-to-close
            await asyncio.gather(
                *(
                    self._post(hook, item, arguments, attempt)
                    for hook in hooks
                    if hook.name not in attempt.delivered
                )
            )
            return _outcome(attempt, len(hooks))

    async def _post(
        self, hook: Hook, item: NotifyInput, arguments: str | None, attempt: _Attempt
    ) -> None:
        scrubber = _scrubbed([hook], self.env)
        where = scrubber.text(hook.where(self.env))
        with scrubbing(scrubber):
            try:
                request = self._request(hook, item, arguments)
            except (ConfigError, httpx.InvalidURL) as exc:
                problem = scrubber.text(_unusable(exc, where))
                attempt.refused.append(problem)
                log.warning("%s", problem)
                return
            try:
                answer = await post(self.transport, request, hook.timeout)
            except (httpx.HTTPError, TimeoutError) as exc:
                problem = f"webhook {where}: {_transport(exc)}"
                attempt.retryable.append(problem)
                log.warning("%s (attempt %d)", problem, activity.info().attempt)
                return
        _answered(hook, where, item, answer, attempt)

    def _request(self, hook: Hook, item: NotifyInput, arguments: str | None) -> httpx.Request:
        """The signed POST; `ConfigError` when its URL or secret cannot be resolved,
        `httpx.InvalidURL` when the URL cannot be posted to."""
        url = hook.resolve_url(self.env)
        secret = hook.resolve_secret(self.env)
        link = inbox_link(self.inbox_url, item)
        render = slack_body if hook.format == "slack" else json_body
        body = json.dumps(render(item, arguments, link), separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "capstan-webhook",
            DELIVERY_HEADER: item.request_id,
            EVENT_HEADER: event_name(item),
        }
        if secret is not None:
            stamp = int(time.time())
            headers[TIMESTAMP_HEADER] = str(stamp)
            headers[SIGNATURE_HEADER] = sign(secret, stamp, body)
        request = httpx.Request("POST", url, content=body, headers=headers)
        if request.url.scheme not in ("http", "https"):
            raise httpx.InvalidURL("not an http(s) URL")
        return request

    async def _arguments(self, item: NotifyInput) -> str | None:
        """The approval's arguments as text; a large one is read from the blob store (its
        preview if the store cannot be read: the inbox shows them whole)."""
        if item.approval is None:
            return None
        arguments = item.approval.arguments
        if not isinstance(arguments, BlobRef):
            return arguments
        try:
            return await asyncio.to_thread(self.content.resolve, arguments)
        except BlobError as exc:
            log.warning("notify %s: arguments unreadable: %s", item.request_id, exc)
            return arguments.preview + " …"


def _scrubbed(hooks: Iterable[Hook], env: Mapping[str, str]) -> Scrubber:
    """A scrubber of the hooks' secrets and URL tokens, read now (they may rotate)."""
    return Scrubber(tuple(sorted({token for hook in hooks for token in hook.tokens(env)})))


def _answered(hook: Hook, where: str, item: NotifyInput, answer: Answer, attempt: _Attempt) -> None:
    status = answer.status
    if status < 300:
        attempt.delivered.add(hook.name)
        activity.heartbeat(sorted(attempt.delivered))
        log.info("webhook %s took %s", where, item.request_id)
        return
    problem = f"webhook {where}: HTTP {status}"
    log.warning("%s (attempt %d)", problem, activity.info().attempt)
    if status >= 500 or status in (408, 429):
        attempt.retryable.append(problem)
        attempt.retry_after = _retry_after(answer.retry_after, attempt.retry_after)
    else:
        attempt.refused.append(problem)


def _outcome(attempt: _Attempt, hooks: int) -> NotifyResult:
    """The result, or the error that fails this attempt (retried if any hook may heal)."""
    if attempt.retryable:
        delay = attempt.retry_after
        raise ApplicationError(
            "; ".join(attempt.retryable + attempt.refused),
            type="WebhookUnavailableError",
            next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
        )
    if attempt.refused:
        raise ApplicationError(
            "; ".join(attempt.refused), type="WebhookRejectedError", non_retryable=True
        )
    return NotifyResult(delivered=len(attempt.delivered), hooks=hooks)


def _unusable(exc: ConfigError | httpx.InvalidURL, where: str) -> str:
    """Why a hook cannot be posted to; a bad URL is not quoted (it may hold a token)."""
    if isinstance(exc, httpx.InvalidURL):
        return f"webhook {where}: its URL is not valid"
    return str(exc)


def _delivered_before() -> set[str]:
    """The hooks an earlier attempt of this activity delivered to (its heartbeat details)."""
    details = activity.info().heartbeat_details
    if not details or not isinstance(details[0], list):
        return set()
    return {str(name) for name in details[0]}


def _transport(exc: httpx.HTTPError | TimeoutError) -> str:
    """A transport failure in a few words, without the URL httpx puts in some messages."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable"
    return type(exc).__name__


def _retry_after(raw: str | None, current: float | None) -> float | None:
    try:
        seconds = min(max(float(raw), 0.0), MAX_RETRY_AFTER) if raw else None
    except ValueError:
        return current
    if seconds is None:
        return current
    return seconds if current is None else max(current, seconds)
