"""The A2A agent card of one agent definition (`CAPSTAN_AGENTS`): who it is, what it takes and
gives, where and how to call it. Pure: the route reads the definition and the address.

The description is the first paragraph of the definition's system prompt (a definition has no
other prose); the one skill is the agent itself, tagged with the tools it may call. It answers
text, or JSON when the definition has an `output_schema`. Calls take a bearer token of the
server's tokens file (the `bearer` HTTP scheme), on the JSON-RPC binding of A2A 1.0 and of 0.3
at the same URL; streaming is offered, push notifications are not (see `capstan.api.a2a`).
"""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from capstan.core.spec import RunSpec
from capstan.core.tooling import FINISH_TOOL

__all__ = ["BEARER", "agent_card", "describe"]

#: the name of the card's security scheme
BEARER = "bearer"
_DESCRIPTION_CHARS = 400
_INPUT_MODES = ["text/plain", "application/json"]


def describe(name: str, spec: RunSpec) -> str:
    """The first paragraph of the system prompt, on one line and bounded."""
    prompt = (spec.system_prompt or "").strip()
    first = " ".join(prompt.split("\n\n", 1)[0].split())
    if not first:
        return f"The Capstan agent {name!r}: send it a task; it answers with an artifact."
    if len(first) > _DESCRIPTION_CHARS:
        return first[: _DESCRIPTION_CHARS - 1] + "…"
    return first


def agent_card(name: str, spec: RunSpec, url: str, version: str) -> AgentCard:
    """The card of agent `name` (resolved as `spec`), served at `url`."""
    output = ["application/json"] if spec.output_schema is not None else ["text/plain"]
    description = describe(name, spec)
    skill = AgentSkill(
        id=name,
        name=name,
        description=description,
        tags=["capstan", *(t for t in spec.allowed_tools or () if t != FINISH_TOOL)],
        input_modes=_INPUT_MODES,
        output_modes=output,
    )
    bearer = SecurityScheme(
        http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="bearer",
            description="a token of the server's tokens file (the same as its REST API's)",
        )
    )
    return AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=version_of,
            )
            for version_of in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={BEARER: bearer},
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=_INPUT_MODES,
        default_output_modes=output,
        skills=[skill],
    )
