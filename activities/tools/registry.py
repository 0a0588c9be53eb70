"""Typed async Python functions as tools: schemas from signatures and docstrings.

A tool is an `async def` with annotated parameters. Its JSON schema comes from a pydantic model
built from the signature; descriptions come from the docstring (Google, reST or numpydoc style,
parsed by `docstring_parser`). A parameter annotated `ToolContext` is injected, not exposed.

Example::

    @tool(read_only=True)
    async def word_count(text: str) -> str:
        \"\"\"Count the words in a text.

        Args:
            text: The text to count.
        \"\"\"
        return str(len(text.split()))
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model

from capstan.core.spec import SandboxLimits
from capstan.core.tooling import FINISH_TOOL, ToolSpec
from capstan.runtime.blobstore import ContentStore

__all__ = ["Tool", "ToolContext", "ToolFunction", "ToolRegistry", "tool"]

ToolFunction = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know about its call. `idempotency_key` is stable across retries."""

    run_id: str
    step: int
    call_id: str
    idempotency_key: str
    workspace: Path
    content: ContentStore
    #: the run's limits, given to the sandbox tools (`run_shell`, `run_python`) only
    sandbox: SandboxLimits | None = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: ToolFunction
    args_model: type[BaseModel]
    context_param: str | None
    read_only: bool
    timeout_seconds: float | None
    untrusted_output: bool = False
    sensitive: bool = False

    def spec(self) -> ToolSpec:
        """The tool's spec, built once: pydantic's schema generation takes ~0.5 ms a tool, and
        every run lists its tools."""
        return self._spec

    @functools.cached_property
    def _spec(self) -> ToolSpec:
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=schema,
            read_only=self.read_only,
            timeout_seconds=self.timeout_seconds,
            untrusted_output=self.untrusted_output,
            sensitive=self.sensitive,
        )


F = TypeVar("F", bound=ToolFunction)


@overload
def tool(fn: F) -> F: ...
@overload
def tool(
    *,
    name: str | None = None,
    read_only: bool = False,
    timeout_seconds: float | None = None,
    untrusted_output: bool = False,
    sensitive: bool = False,
) -> Callable[[F], F]: ...
def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    read_only: bool = False,
    timeout_seconds: float | None = None,
    untrusted_output: bool = False,
    sensitive: bool = False,
) -> F | Callable[[F], F]:
    """Mark an async function as a tool (usable bare or with options).

    The risk profile drives the default policy: `read_only` tools are allowed, others ask a
    human; `untrusted_output` (web, files, MCP) is fenced for the model; `sensitive` marks access
    to private data (with untrusted input and state change it triggers the Rule of Two).
    """

    def mark(f: F) -> F:
        f.__capstan_tool__ = {  # type: ignore[attr-defined]
            "name": name or f.__name__,
            "read_only": read_only,
            "timeout_seconds": timeout_seconds,
            "untrusted_output": untrusted_output,
            "sensitive": sensitive,
        }
        return f

    return mark(fn) if fn is not None else mark


def _build(fn: ToolFunction) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {fn.__name__} must be an async function")
    options = getattr(fn, "__capstan_tool__", {})
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    context_param = None
    for pname, param in inspect.signature(fn).parameters.items():
        annotation = hints.get(pname, Any)
        if annotation is ToolContext:
            context_param = pname
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=param_docs.get(pname) or None))
    config = ConfigDict(extra="forbid")
    model = create_model(f"{fn.__name__}_args", __config__=config, **fields)
    description = "\n\n".join(x for x in (doc.short_description, doc.long_description) if x)
    return Tool(
        name=options.get("name", fn.__name__),
        description=description or fn.__name__,
        fn=fn,
        args_model=model,
        context_param=context_param,
        read_only=options.get("read_only", False),
        timeout_seconds=options.get("timeout_seconds"),
        untrusted_output=options.get("untrusted_output", False),
        sensitive=options.get("sensitive", False),
    )


class ToolRegistry:
    """Tools by name. Built in the worker; the workflow sees only their specs."""

    def __init__(self, functions: Iterable[ToolFunction] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._extra_specs: dict[str, ToolSpec] = {}
        for fn in functions:
            self.add(fn)

    def add(self, fn: ToolFunction) -> Tool:
        built = _build(fn)
        if built.name in self._tools or built.name in self._extra_specs:
            raise ValueError(f"tool {built.name!r} is registered twice")
        self._tools[built.name] = built
        return built

    def add_spec(self, spec: ToolSpec) -> None:
        """A tool the loop handles itself (like `finish`): offered to the model, never run here."""
        self._extra_specs[spec.name] = spec

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Every registered name, loop tools included."""
        return [*self._extra_specs, *self._tools]

    def specs(self, allowed: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs in a stable order; `allowed` filters everything but `finish`, always offered."""
        wanted = None if allowed is None else {*allowed, FINISH_TOOL}
        specs = [s for s in self._extra_specs.values() if wanted is None or s.name in wanted]
        specs += [t.spec() for t in self._tools.values() if wanted is None or t.name in wanted]
        return specs
