"""A scripted model and tool runner that drive the pure loop with no Temporal and no IO."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from capstan.core import loop
from capstan.core.activity_io import CheckFinishInput, CompactResult, FinishVerdict, ModelReply
from capstan.core.content import BlobRef
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CallModel,
    CheckFinish,
    CompactContext,
    ContextCompacted,
    ContinueAsNew,
    DescribeModel,
    Finish,
    FinishChecked,
    LoadTools,
    ModelDescribed,
    ModelFailed,
    ModelReplied,
    Outcome,
    RunTools,
    Steered,
    ToolsFinished,
    ToolsLoaded,
)
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.models import ModelChain, ModelInfo
from capstan.core.output import check_answer
from capstan.core.spec import RunResult, RunSpec
from capstan.core.state import RunState
from capstan.core.tooling import ToolCatalog, ToolInfo, ToolOutcome, ToolSucceeded

TOOLS = ("finish", "read_file", "write_file", "list_dir", "read_result")


def fake_ref(label: str) -> BlobRef:
    return BlobRef(sha256=hashlib.sha256(label.encode()).hexdigest(), size=len(label))


PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "additionalProperties": False,
}
INFOS = {
    "finish": ToolInfo(read_only=True),
    "read_file": ToolInfo(read_only=True, untrusted_output=True, parameters=PATH_SCHEMA),
    "write_file": ToolInfo(read_only=False, parameters=PATH_SCHEMA),
    "list_dir": ToolInfo(read_only=True),
    "read_result": ToolInfo(read_only=True),
}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def chain(*windows: int) -> ModelChain:
    """A primary model and fallbacks with these context windows (reply reserve 1,000)."""
    return ModelChain(
        models=tuple(
            ModelInfo(
                profile="default" if i == 0 else f"fallback{i}",
                provider="openai",
                model=f"scripted-{i}",
                context_window=w,
                max_output_tokens=1_000,
            )
            for i, w in enumerate(windows or (100_000,))
        )
    )


def catalog(names: tuple[str, ...] = TOOLS, **infos: ToolInfo) -> ToolCatalog:
    tools = {n: INFOS.get(n, ToolInfo()) for n in names} | infos
    return ToolCatalog(names=tuple(tools), specs_ref=fake_ref("specs"), tools=tools)


def call(name: str, call_id: str = "c1", **args: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


def reply(text: str = "", *calls: ToolCall, step: int = 0) -> ModelReply:
    msg = Message(role="assistant", content=text, tool_calls=calls, origin="model", step=step)
    return ModelReply(
        message=msg,
        conversation=fake_ref(f"conv-{step}-{text}-{calls}"),
        usage=Usage(input_tokens=10, output_tokens=5),
        stop_reason="tool_calls" if calls else "stop",
        model="scripted",
    )


Script = list[ModelReply | ModelFailed]


@dataclass
class Driver:
    """Runs the loop to completion against a script; records every effect it saw."""

    script: Script
    tool: Callable[[str, str], str] = lambda name, args: f"{name} ok"
    effects: list[object] = field(default_factory=list)
    model_inputs: list[CallModel] = field(default_factory=list)
    tool_inputs: list[RunTools] = field(default_factory=list)
    #: answers AwaitInput: given the state, returns steering inputs (or advances the clock)
    human: Callable[[RunState], list[object]] | None = None
    now: datetime = T0
    catalog: ToolCatalog = field(default_factory=catalog)
    models: ModelChain = field(default_factory=chain)
    compactions: list[CompactContext] = field(default_factory=list)
    #: tokens a compaction leaves, given the strategy and the tokens before
    compactor: Callable[[str, int], int] = lambda strategy, before: before // 3
    #: the worker's finish guard: answer -> refusal reason (None accepts)
    finish_guard: Callable[[str], str | None] | None = None
    checked: list[str] = field(default_factory=list)

    def run(self, spec: RunSpec, state: RunState | None = None) -> tuple[RunResult, RunState]:
        state = state or loop.initial_state(spec, "run-1")
        for _ in range(10_000):
            state = loop.apply(state, Boundary(now=self.now))
            effect = loop.next_effect(state)
            self.effects.append(effect)
            if isinstance(effect, Finish):
                return effect.result, state
            if isinstance(effect, ContinueAsNew):
                state = loop.carry_over(state)
                continue
            if isinstance(effect, AwaitInput):
                if self.human is None:
                    raise AssertionError(f"the run waits for {effect.waiting_for} and no human")
                for item in self.human(state):
                    if isinstance(item, timedelta):
                        self.now += item
                    else:
                        state = loop.apply(state, Steered(input=item))  # type: ignore[arg-type]
                continue
            state = loop.apply(state, self._perform(effect, state))
        raise AssertionError("loop did not finish")

    def _check_finish(self, request: CheckFinishInput) -> FinishVerdict:
        """As the worker's `check_finish`: the output schema (a typed run), then the hook."""
        answer, stored = str(request.answer), None
        if request.output_schema is not None:
            checked = check_answer(request.output_schema, answer)
            if checked.errors:
                return FinishVerdict(output=checked.answer, invalid=checked.errors)
            answer = stored = checked.answer or ""
        if self.finish_guard is None or not request.hook:
            return FinishVerdict(output=stored)
        self.checked.append(answer)
        return FinishVerdict(refusal=self.finish_guard(answer), output=stored)

    def _perform(self, effect: object, state: RunState) -> Outcome:
        match effect:
            case LoadTools():
                hooked = self.finish_guard is not None
                return ToolsLoaded(catalog=self.catalog.model_copy(update={"finish_hook": hooked}))
            case DescribeModel():
                return ModelDescribed(chain=self.models)
            case CheckFinish(request=request):
                return FinishChecked(verdict=self._check_finish(request))
            case CompactContext(request=request):
                self.compactions.append(effect)
                before = state.context.tokens
                after = (
                    before
                    if request.strategy == "warn"
                    else self.compactor(request.strategy, before)
                )
                return ContextCompacted(
                    result=CompactResult(
                        strategy=request.strategy,
                        conversation=None
                        if request.strategy == "warn"
                        else fake_ref(f"c{len(self.compactions)}"),
                        tokens_before=before,
                        tokens_after=after,
                        nudge="these outputs will be pruned"
                        if request.strategy == "warn"
                        else None,
                    )
                )
            case CallModel():
                self.model_inputs.append(effect)
                if not self.script:
                    raise AssertionError("the script ran out")
                item = self.script.pop(0)
                return item if isinstance(item, ModelFailed) else ModelReplied(reply=item)
            case RunTools(calls=calls):
                self.tool_inputs.append(effect)
                results: list[ToolOutcome] = [
                    ToolSucceeded(call_id=c.call_id, output=self.tool(c.name, str(c.arguments)))
                    for c in calls
                ]
                return ToolsFinished(results=tuple(results))
        raise AssertionError(f"unexpected effect {effect!r}")

    def assert_complete(self) -> None:
        assert not self.script, f"{len(self.script)} scripted replies were never requested"


def started(spec: RunSpec, now: datetime = T0) -> RunState:
    """A run that has loaded its tools and model and is about to think."""
    state = loop.apply(loop.initial_state(spec, "r"), Boundary(now=now))
    state = loop.apply(state, ToolsLoaded(catalog=catalog()))
    return loop.apply(state, ModelDescribed(chain=chain()))
