"""The agent workflow's input type: a start input, plus the state a continue-as-new carries.

Only the workflow (and what reads a whole history, as the audit does) needs the carried state;
clients send and read `capstan.core.workflow_io.StartInput`, whose fields this extends, so the
two agree on the wire by construction.
"""

from __future__ import annotations

from capstan.core.state import RunState
from capstan.core.workflow_io import StartInput

__all__ = ["AgentInput"]


class AgentInput(StartInput):
    """The workflow input: the spec, plus the carried state after a continue-as-new."""

    carried: RunState | None = None
