"""Capstan's test kit: test an agent in a few lines, as Capstan tests itself.

    from capstan.testing import CapstanTestEnv, call, finish, say

    async with CapstanTestEnv(tools=[my_tool]) as env:
        env.model.script(say("hi"), call("my_tool", x=1), finish("done"))
        result = await env.run("task", allowed_tools=["my_tool"], auto_approve=True)
        assert result.output == "done"

- `CapstanTestEnv`: the embedded Temporal server, a scripted model and an in-process worker
  with your tools (`capstan.testing.env`);
- `FakeProvider`, `say`, `call`, `finish`, `Fault`: the scripted model on a loopback socket,
  speaking the OpenAI and Anthropic wire formats (`capstan.testing.fake_provider`);
- `temporal_server`: one dev server to share between tests (a session fixture).

Names are loaded on first use. Nothing here is imported by production code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capstan.testing.env import CapstanTestEnv, ScriptedModel, temporal_server
    from capstan.testing.fake_provider import FakeProvider, Fault, Reply, call, finish, say

#: public name -> the module that defines it
_EXPORTS = {
    "CapstanTestEnv": "capstan.testing.env",
    "ScriptedModel": "capstan.testing.env",
    "temporal_server": "capstan.testing.env",
    "FakeProvider": "capstan.testing.fake_provider",
    "Fault": "capstan.testing.fake_provider",
    "Reply": "capstan.testing.fake_provider",
    "call": "capstan.testing.fake_provider",
    "finish": "capstan.testing.fake_provider",
    "say": "capstan.testing.fake_provider",
}

__all__ = [
    "CapstanTestEnv",
    "FakeProvider",
    "Fault",
    "Reply",
    "ScriptedModel",
    "call",
    "finish",
    "say",
    "temporal_server",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'capstan.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
