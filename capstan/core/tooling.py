"""Tool descriptions as the loop and the model see them, and tool outcomes as they cross the wire.

A tool's outcome is a tagged union (`ToolSucceeded | ToolFailed`), never an activity failure, so
the model always gets an observation. Pure types only; the registry lives in `activities.tools`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capstan.core.content import BlobRef, Text
from capstan.core.notifications import NotifyKind
from capstan.core.tool_names import ASK_USER_TOOL, FINISH_TOOL, READ_RESULT_TOOL

__all__ = [
    "ASK_USER_TOOL",
    "FINISH_TOOL",
    "READ_RESULT_TOOL",
    "ToolCatalog",
    "ToolFailed",
    "ToolFailure",
    "ToolInfo",
    "ToolOrigin",
    "ToolOutcome",
    "ToolSpec",
    "ToolSucceeded",
]


class ToolOrigin(BaseModel):
    """Where a tool comes from when the worker does not run it itself: an MCP server, the tool's
    name there and the annotations it declared (`readOnlyHint`, `destructiveHint`, ...), as
    listed when the run started."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["mcp"] = "mcp"
    server: str
    name: str
    annotations: dict[str, Any] = {}


class ToolSpec(BaseModel):
    """A tool's name, description, JSON schema and operating limits."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = False
    timeout_seconds: float | None = None
    untrusted_output: bool = False
    sensitive: bool = False
    origin: ToolOrigin | None = None
    #: the provider may enforce `parameters` exactly (OpenAI's strict function calling): set on
    #: a typed run's `finish` when its schema is in the strict subset (`capstan.core.output`)
    strict: bool = False


class ToolInfo(BaseModel):
    """What the loop needs to gate a tool: its risk profile, schema and worker policy."""

    model_config = ConfigDict(frozen=True)

    read_only: bool = False
    untrusted_output: bool = False
    sensitive: bool = False
    parameters: dict[str, Any] = {}
    policy: str | None = None  # allow / ask / deny from the worker's policy file
    deny_arguments: dict[str, str] = {}


class ToolCatalog(BaseModel):
    """The tools offered to one run, fetched by an activity at run start (so it is in history).

    `specs_ref` points at the full schemas in the blob store; the model activity reads them from
    there so each model call's input stays small.
    """

    model_config = ConfigDict(frozen=True)

    names: tuple[str, ...]
    timeouts: dict[str, float] = {}
    specs_ref: BlobRef
    tools: dict[str, ToolInfo] = {}
    #: the worker has a finish guard hook (`CAPSTAN_FINISH_GUARD`): finishes are checked by it
    finish_hook: bool = False
    #: what the listing could not offer (an MCP server that was down), for status and audit
    diagnostics: tuple[str, ...] = ()
    #: the kinds of opened request the listing worker posts to webhooks (`CAPSTAN_WEBHOOKS`):
    #: the run starts a `notify_request` for these only, so a worker without hooks adds no
    #: activity (and no extra workflow task) to every wait. Like the policy file, it is what the
    #: run was listed with. None: a catalog from before the field (every kind, as then).
    notify: tuple[NotifyKind, ...] | None = None

    def timeout_for(self, name: str, default: float) -> float:
        return self.timeouts.get(name, default)


ToolFailure = Literal[
    "unknown_tool", "invalid_arguments", "error", "timeout", "not_run", "denied", "expired"
]


class ToolSucceeded(BaseModel):
    kind: Literal["succeeded"] = "succeeded"
    call_id: str
    output: Text
    duration_ms: int = 0


class ToolFailed(BaseModel):
    kind: Literal["failed"] = "failed"
    call_id: str
    failure: ToolFailure
    error: str
    duration_ms: int = 0


ToolOutcome = Annotated[ToolSucceeded | ToolFailed, Field(discriminator="kind")]
