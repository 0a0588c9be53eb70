"""The A2A request handler of `capstan serve`: every method of the protocol, on Capstan runs.

a2a-sdk's JSON-RPC dispatcher parses a call (A2A 1.0 names such as `SendMessage`, and 0.3
names such as `message/send` through its compatibility adapter) and hands it here as the
protocol's own types; this class answers from Temporal through `capstan.api.a2a_runs`, in
the caller's name and tenant (`Caller`, put in the call's context by the route after it
checked the token). Each method's failures leave as A2A errors (`capstan.api.a2a_errors`).

Not offered, with the protocol's own errors: push notifications
(`PushNotificationNotSupportedError`; see `capstan.api.a2a`), listing tasks and the extended
card (`UnsupportedOperationError`: a context's runs are `GET /api/threads/{context}`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import validate_history_length

from capstan.api.a2a_errors import a2a_errors
from capstan.api.a2a_input import read_message
from capstan.api.a2a_runs import Located, TaskRuns
from capstan.api.auth import Principal
from capstan.api.backend import Backend
from capstan.api.tenancy import Tenancy
from capstan.runtime.api_settings import ApiSettings

__all__ = ["BLOCKING_WAIT", "CALLER", "CANCEL_WAIT", "Caller", "RunsHandler"]

#: the key of the `Caller` in a call's context state
CALLER = "capstan_caller"
#: how long a blocking `SendMessage` waits for its task to end or need input (seconds); then
#: the task is answered as it is (`working`), to be followed with `GetTask` or a stream
BLOCKING_WAIT = 60.0
#: how long `CancelTask` waits for the run to end before it answers (seconds)
CANCEL_WAIT = 10.0
_NO_PUSH = (
    "push notifications are not offered: follow a task with SendStreamingMessage or "
    "SubscribeToTask, or poll GetTask"
)


@dataclass(frozen=True)
class _Delivered:
    """Where a message went: its task, the requests it decided (the run lists them until it
    has taken the decision), and whether it started the task's run."""

    located: Located
    decided: frozenset[str] = frozenset()
    started: bool = False


@dataclass(frozen=True)
class Caller:
    """Who calls, and which agent definition of the server the call is to."""

    principal: Principal
    agent: str


class RunsHandler(RequestHandler):
    """A2A methods over the server's Temporal client."""

    def __init__(self, backend: Backend, api: ApiSettings) -> None:
        self.backend = backend
        self.api = api

    async def _tasks(self, context: ServerCallContext) -> tuple[TaskRuns, Caller]:
        caller = context.state.get(CALLER)
        if not isinstance(caller, Caller):  # only the routes of `capstan.api.a2a` call here
            raise InternalError("the call reached the handler without a caller")
        runs = Tenancy(await self.backend.client(), self.backend.tenant_index)
        return TaskRuns(runs, caller.principal, self.api.stream_poll_seconds), caller

    async def _deliver(
        self, tasks: TaskRuns, caller: Caller, params: SendMessageRequest
    ) -> _Delivered:
        """The message, delivered: a new task, or to the task it names."""
        validate_history_length(params.configuration)
        if params.configuration.HasField("task_push_notification_config"):
            raise PushNotificationNotSupportedError(_NO_PUSH)
        message = params.message
        said = read_message(message)
        if not message.task_id:
            context = message.context_id or None
            located, started = await tasks.start(caller.agent, said, context, message.message_id)
            return _Delivered(located, started=started)
        located = await tasks.locate(message.task_id)
        if message.context_id and message.context_id != located.context:
            raise InvalidParamsError(
                f"contextId {message.context_id!r} is not the context of task "
                f"{message.task_id!r} ({located.context!r})"
            )
        return _Delivered(located, await tasks.send(located, said, message.message_id))

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Start or continue a task; its state once it has ended or needs input (at most
        `BLOCKING_WAIT`), or at once with `returnImmediately`."""
        validate_proto_required_fields(params)
        with a2a_errors():
            tasks, caller = await self._tasks(context)
            sent = await self._deliver(tasks, caller, params)
            if params.configuration.return_immediately:
                return await tasks.snapshot(sent.located, sent.decided)
            return await tasks.settle(sent.located, sent.decided, BLOCKING_WAIT)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """Start or continue a task, then follow it until it ends or needs input."""
        validate_proto_required_fields(params)
        with a2a_errors():
            tasks, caller = await self._tasks(context)
            sent = await self._deliver(tasks, caller, params)
            stream = tasks.follow(sent.located, sent.decided, fresh=sent.started)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """Follow a task that has not ended."""
        validate_proto_required_fields(params)
        with a2a_errors():
            tasks, _ = await self._tasks(context)
            located = await tasks.locate(params.id)
            if not located.running:
                raise UnsupportedOperationError(
                    f"task {params.id!r} has ended: read it with GetTask"
                )
            async with contextlib.aclosing(tasks.follow(located)) as events:
                async for event in events:
                    yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        validate_proto_required_fields(params)
        with a2a_errors():
            validate_history_length(params)
            tasks, _ = await self._tasks(context)
            return await tasks.snapshot(await tasks.locate(params.id))

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        """Ask the run to end; the task once it has (at most `CANCEL_WAIT`)."""
        validate_proto_required_fields(params)
        with a2a_errors():
            tasks, _ = await self._tasks(context)
            located = await tasks.locate(params.id)
            waiting = await tasks.cancel(located)
            return await tasks.settle(located, waiting, CANCEL_WAIT)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        raise UnsupportedOperationError(
            "tasks are not listed here: a context's runs are GET /api/threads/{context}"
        )

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError("the agent card at .well-known/agent-card.json is whole")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError(_NO_PUSH)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError(_NO_PUSH)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError(_NO_PUSH)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError(_NO_PUSH)
