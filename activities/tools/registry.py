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
from typing import Any, TypeVar, get_args, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, TypeAdapter, create_model

from capstan.core.spec import SandboxLimits
from capstan.core.tooling import FINISH_TOOL, ToolSpec
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.environment import ConfigError

__all__ = ["Tool", "ToolContext", "ToolFunction", "ToolRegistry", "ToolSignatureError", "tool"]

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


class ToolSignatureError(TypeError):
    """A tool whose signature the schema cannot express faithfully; the message is one line
    naming the tool and the parameter."""


#: What a parameter the model fills may be: JSON Schema's types and what pydantic builds on them
_SUPPORTED = "str, int, float, bool, None, Literal, enums, lists, dicts or pydantic models"


def _build(fn: ToolFunction) -> Tool:
    name = str(getattr(fn, "__capstan_tool__", {}).get("name") or getattr(fn, "__name__", fn))
    if not inspect.iscoroutinefunction(fn):
        raise ToolSignatureError(f"tool {name} must be an async function (`async def`)")
    options = getattr(fn, "__capstan_tool__", {})
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    fields, context_param = _fields(name, fn, param_docs)
    config = ConfigDict(extra="forbid")
    model = create_model(f"{fn.__name__}_args", __config__=config, **fields)
    description = "\n\n".join(x for x in (doc.short_description, doc.long_description) if x)
    built = Tool(
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
    try:
        built.spec()  # built now, so a schema that cannot be made fails at start, not per run
    except PydanticUserError as exc:
        raise ToolSignatureError(f"tool {name}: no JSON schema: {_first_line(exc)}") from None
    return built


def _fields(
    name: str, fn: ToolFunction, param_docs: dict[str, str]
) -> tuple[dict[str, Any], str | None]:
    """The model-filled parameters as pydantic fields, and the `ToolContext` parameter's name.
    Every parameter must be named, annotated and expressible as JSON Schema."""
    try:
        hints = get_type_hints(fn)
    except Exception as exc:  # any error an annotation raises when evaluated
        raise ToolSignatureError(f"tool {name}: its annotations cannot be read: {exc}") from None
    fields: dict[str, Any] = {}
    context_param = None
    for pname, param in inspect.signature(fn).parameters.items():
        where = f"tool {name}: parameter {_shown(param)}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolSignatureError(
                f"{where}: a model passes named arguments only; declare each one by name"
            )
        if pname.startswith("_"):
            raise ToolSignatureError(f"{where}: a name the model fills may not start with _")
        if pname not in hints:
            raise ToolSignatureError(f"{where} has no type annotation{_context_hint(pname)}")
        annotation = hints[pname]
        if annotation is ToolContext:
            if context_param is not None:
                raise ToolSignatureError(f"{where}: a tool takes one ToolContext parameter")
            context_param = pname
            continue
        _check_expressible(where, annotation)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=param_docs.get(pname) or None))
    return fields, context_param


def _check_expressible(where: str, annotation: Any) -> None:
    if _mentions_context(annotation):
        raise ToolSignatureError(f"{where}: annotate the context exactly `ToolContext`")
    try:
        schema = TypeAdapter(annotation).json_schema()
    except PydanticUserError:
        schema = {}
    if not schema and annotation is not Any and annotation is not object:  # {}: "anything"
        raise ToolSignatureError(
            f"{where}: type {_type_name(annotation)} cannot be a JSON schema; use {_SUPPORTED}"
        )


def _mentions_context(annotation: Any) -> bool:
    return annotation is ToolContext or any(_mentions_context(a) for a in get_args(annotation))


def _context_hint(pname: str) -> str:
    if pname in ("ctx", "context"):
        return f" (annotate it `{pname}: ToolContext` to receive the call's context)"
    return " (every parameter the model fills needs one)"


def _shown(param: inspect.Parameter) -> str:
    if param.kind is param.VAR_POSITIONAL:
        return f"*{param.name}"
    return f"**{param.name}" if param.kind is param.VAR_KEYWORD else param.name


def _type_name(annotation: Any) -> str:
    return annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class ToolRegistry:
    """Tools by name. Built in the worker; the workflow sees only their specs."""

    def __init__(self, functions: Iterable[ToolFunction] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._extra_specs: dict[str, ToolSpec] = {}
        self._sources: dict[str, str] = {}
        for fn in functions:
            self.add(fn)

    def add(self, fn: ToolFunction, source: str = "builtin") -> Tool:
        """Register `fn`; `source` says where it came from (`builtin`, `module pkg.tools`)."""
        built = _build(fn)
        if built.name in self._tools or built.name in self._extra_specs:
            first = self.source(built.name)
            raise ValueError(f"tool {built.name!r} is registered twice ({first}, then {source})")
        self._tools[built.name] = built
        self._sources[built.name] = source
        return built

    def add_module(self, module: object, module_name: str) -> None:
        """Every tool of a user's module's `tools` list (`CAPSTAN_TOOLS=pkg.module`); a module
        without one, or a tool that cannot be offered, is one `ConfigError` line naming it."""
        where = f"CAPSTAN_TOOLS={module_name}"
        listed = getattr(module, "tools", None)
        if listed is None:
            raise ConfigError(f"{where}: the module has no `tools` list (add `tools = [my_tool]`)")
        if not isinstance(listed, list | tuple):
            kind = type(listed).__name__
            raise ConfigError(f"{where}: `tools` is a {kind}, not a list of async functions")
        for fn in listed:
            try:
                self.add(fn, source=f"module {module_name}")
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: {exc}") from None

    def source(self, name: str) -> str:
        """Where a registered tool comes from: `builtin`, `loop` or `module <name>`."""
        return self._sources.get(name, "loop" if name in self._extra_specs else "unknown")

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
