"""`capstan.testing` as an outside project uses it: this file imports only `capstan` and
`capstan.testing` public names (no fixture of Capstan's own suite), writes its own tools, and
tests an agent with them in a few lines each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from capstan import TerminalReason, ToolContext, tool
from capstan.testing import CapstanTestEnv, call, finish, say, temporal_server

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: what the tools below were called with, by tool
CALLS: dict[str, list[dict[str, Any]]] = {"lookup_order": [], "refund": []}


@tool(read_only=True)
async def lookup_order(order: int) -> str:
    """Where an order is.

    Args:
        order: The order number.
    """
    CALLS["lookup_order"].append({"order": order})
    return f"order {order}: shipped on Monday"


@tool
async def refund(ctx: ToolContext, order: int, amount: float) -> str:
    """Refund part of an order (changes state: a person approves it by default).

    Args:
        order: The order number.
        amount: How much to refund.
    """
    CALLS["refund"].append({"order": order, "amount": amount, "key": ctx.idempotency_key})
    return f"refunded {amount} on order {order}"


@pytest.fixture(scope="module")
async def server_address() -> AsyncIterator[str]:
    """One Temporal dev server for the module's tests (as a project's conftest would share)."""
    async with temporal_server() as server:
        yield server.address


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    for calls in CALLS.values():
        calls.clear()


async def test_an_agent_in_a_few_lines() -> None:
    """The whole kit with nothing given but the tools: it starts its own server."""
    async with CapstanTestEnv(tools=[lookup_order]) as env:
        env.model.script(say("Looking."), call("lookup_order", order=42), finish("shipped"))
        result = await env.run("Where is order 42?")
        env.model.assert_complete()
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "shipped"
    assert CALLS["lookup_order"] == [{"order": 42}]
    tool_messages = [m for m in env.model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "shipped on Monday" in tool_messages[0]["content"]


async def test_a_state_changing_tool_waits_for_its_approval(server_address: str) -> None:
    async with CapstanTestEnv(tools=[lookup_order, refund], temporal=server_address) as env:
        env.model.script(call("refund", order=7, amount=5.0), finish("refunded"))
        run_id = await env.start("Refund 5 on order 7")
        request = await env.approve(run_id, tool="refund")
        result = await env.result(run_id)
    assert request.tool == "refund" and CALLS["refund"][0]["amount"] == 5.0
    assert result.output == "refunded"
    assert CALLS["refund"][0]["key"].startswith(run_id)


async def test_a_run_left_waiting_says_what_it_waits_for(server_address: str) -> None:
    async with CapstanTestEnv(tools=[refund], temporal=server_address) as env:
        env.model.script(call("refund", order=7, amount=5.0), finish("refunded"))
        run_id = await env.start("Refund 5 on order 7")
        await env.pending(run_id)
        with pytest.raises(AssertionError, match=r"waits for approval of refund"):
            await env.result(run_id, timeout=0.5)
        await env.client.cancel(run_id)
        cancelled = await env.result(run_id)
    assert cancelled.terminal_reason is TerminalReason.CANCELLED and not CALLS["refund"]


async def test_allowed_tools_keep_a_business_agent_to_its_tools(server_address: str) -> None:
    """With `allowed_tools`, the shell, Python and file tools are not offered: a call to one is
    refused and the model is told so; the run goes on."""
    async with CapstanTestEnv(tools=[lookup_order], temporal=server_address) as env:
        env.model.script(
            call("run_shell", command="cat /etc/passwd"),
            call("lookup_order", order=1),
            finish("order 1 shipped"),
        )
        result = await env.run("Where is order 1?", allowed_tools=["lookup_order"])
        offered = {t["function"]["name"] for t in env.model.requests[0]["tools"]}
        refused = [m for m in env.model.requests[1]["messages"] if m["role"] == "tool"]
        assert not [p for p in env.workspace.rglob("*") if p.is_file()]  # run_shell never ran
    assert offered == {"lookup_order", "finish"}, offered
    assert "run_shell" in refused[0]["content"]
    assert result.output == "order 1 shipped" and CALLS["lookup_order"] == [{"order": 1}]


async def test_tools_from_a_module_the_way_capstan_tools_names_it(server_address: str) -> None:
    """`tools=` a dotted module name: its `tools` list, loaded as `CAPSTAN_TOOLS` loads it."""
    async with CapstanTestEnv(tools="tests.sample_tools", temporal=server_address) as env:
        env.model.script(call("shout", text="hi"), finish("HI"))
        result = await env.run("Shout hi")
        (observation,) = [m for m in env.model.requests[1]["messages"] if m["role"] == "tool"]
    assert result.output == "HI" and "HI" in observation["content"]
