"""The baseline: a bare Temporal workflow running the same activities as `AgentWorkflow`.

Per iteration: one `call_model`, then the reply's tool calls as parallel `run_tool` activities,
with the conversation threaded through exactly as Capstan does, and none of the loop's
bookkeeping. The ratio of the two per-iteration times is Capstan's orchestration overhead.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from capstan.core.activity_io import CallModelInput, ListToolsInput, ModelReply, RunToolInput
    from capstan.core.content import BlobRef
    from capstan.core.messages import Message
    from capstan.core.tooling import ToolCatalog, ToolSucceeded


@workflow.defn(name="BareWorkflow")
class BareWorkflow:
    @workflow.run
    async def run(self, task: str) -> int:
        timeout = timedelta(seconds=60)
        catalog = await workflow.execute_activity(
            "list_tools", ListToolsInput(), result_type=ToolCatalog, start_to_close_timeout=timeout
        )
        head: BlobRef | None = None
        pending = [Message(role="user", content=task)]
        step = 0
        while True:
            step += 1
            reply = await workflow.execute_activity(
                "call_model",
                CallModelInput(
                    run_id="bare",
                    step=step,
                    profile="default",
                    conversation=head,
                    new_messages=tuple(pending),
                    tools=catalog.specs_ref,
                ),
                result_type=ModelReply,
                start_to_close_timeout=timeout,
            )
            head = reply.conversation
            calls = [c for c in reply.message.tool_calls if c.name != "finish"]
            if not calls:
                return step
            results = await asyncio.gather(
                *(
                    workflow.execute_activity(
                        "run_tool",
                        RunToolInput(
                            run_id="bare",
                            step=step,
                            call_id=c.id,
                            name=c.name,
                            arguments=c.arguments,
                            idempotency_key=f"bare/{step}/{c.id}",
                        ),
                        result_type=ToolSucceeded,
                        start_to_close_timeout=timeout,
                    )
                    for c in calls
                )
            )
            pending = [
                Message(role="tool", content=r.output, tool_call_id=r.call_id) for r in results
            ]
