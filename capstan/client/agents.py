"""Agent definitions and spec files: a named agent a team defines once, resolved into a RunSpec.

An agents file (`CAPSTAN_AGENTS`) is TOML with one table per agent; its keys are `RunSpec`
fields (everything but `task` and `run_id`)::

    [researcher]
    system_prompt = "You read files and report what they say."
    allowed_tools = ["list_dir", "read_file", "finish"]
    max_steps = 30
    budgets = { max_tool_calls = 40 }

    [writer]
    model = "anthropic"
    tool_policy = { write_file = { decision = "allow" } }
    delegates = ["researcher"]      # may hand tasks to these agents (`delegate(agent, task)`)

The client resolves a definition into the full `RunSpec` it starts the run with, so the
definition a run used is in its history (and its audit) whatever happens to the file later.
A spec file (`capstan run --spec run.toml|run.json`) is a whole `RunSpec`. Unknown keys, at any
depth, and bad values are one line naming the file, the agent and the field.

`delegates` names other agents of the file. Resolving embeds their definitions into the spec,
recursively down to the run's `max_depth` (default 2), so the definitions of the whole tree
are in the parent's history and a child never reads the file.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from capstan.client.runs import CapstanError
from capstan.core.spec import INTERNAL_FIELDS, RunSpec

__all__ = ["AgentsError", "load_agents", "load_spec", "read_output_schema", "resolve_agent"]

_NOT_DEFINED = ("task", "run_id", "agent", "depth")
_DELEGATES = "delegates"


class AgentsError(CapstanError):
    """An agents or spec file that cannot be used, in one line naming where."""


def load_agents(path: Path) -> dict[str, dict[str, Any]]:
    """Every definition of an agents file, checked (unknown keys and bad values refused)."""
    tables = _read(path)
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise AgentsError(f"{path}: {name!r} is not a table of RunSpec fields")
        where = f"{path}: agent {name!r}"
        for key in _NOT_DEFINED:
            if key in table:
                raise AgentsError(f"{where}: {key!r} is given per run, not in a definition")
        _check_delegates(where, tables, table.get(_DELEGATES, []))
        _schema_file(path, where, table)
        fields = {k: v for k, v in table.items() if k != _DELEGATES}
        _validate(where, {"task": "(definition check)", **fields})
    return tables


def resolve_agent(path: Path, name: str, task: str, **overrides: Any) -> RunSpec:
    """The RunSpec for running agent `name` on `task` (overrides: other RunSpec fields)."""
    agents = load_agents(path)
    if name not in agents:
        known = ", ".join(sorted(agents)) or "none"
        raise AgentsError(f"{path}: no agent {name!r} (defined: {known})")
    max_depth = overrides.get("max_depth", agents[name].get("max_depth", 2))
    fields = {**_embedded(agents, name, 0, max_depth), **overrides, "task": task, "agent": name}
    return _validate(f"{path}: agent {name!r}", fields)


def _check_delegates(where: str, tables: dict[str, Any], names: Any) -> None:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise AgentsError(f"{where}: delegates: expected a list of agent names")
    for delegate in names:
        if delegate not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise AgentsError(f"{where}: delegates: no agent {delegate!r} (defined: {known})")


def _embedded(agents: dict[str, dict[str, Any]], name: str, depth: int, max_depth: int) -> Any:
    """Agent `name`'s fields with the definitions it delegates to embedded (a run at
    `max_depth` cannot delegate, so the embedding stops there)."""
    fields = {k: v for k, v in agents[name].items() if k != _DELEGATES}
    names = agents[name].get(_DELEGATES, [])
    if names and depth < max_depth:
        fields[_DELEGATES] = {
            n: {**_embedded(agents, n, depth + 1, max_depth), "task": "", "agent": n} for n in names
        }
    return fields


def load_spec(path: Path, **overrides: Any) -> RunSpec:
    """A whole RunSpec from a TOML or JSON file (overrides: RunSpec fields given on top)."""
    data = _read(path)
    _schema_file(path, str(path), data)
    return _validate(str(path), {**data, **overrides})


def load_overrides(path: Path) -> dict[str, Any]:
    """Some RunSpec fields from a TOML or JSON file, to put over another spec (`capstan fork
    --spec`): unknown keys (with a suggestion) and fields Capstan sets itself are refused."""
    data = _read(path)
    _schema_file(path, str(path), data)
    if (unknown := _unknown_key(RunSpec, data, "")) is not None:
        raise AgentsError(f"{path}: {unknown}")
    if internal := sorted(set(data) & INTERNAL_FIELDS):
        raise AgentsError(f"{path}: {internal[0]} is set by Capstan, not by a spec file")
    return data


def read_output_schema(path: Path) -> dict[str, Any]:
    """An output schema from a JSON file (`capstan run --output-schema FILE`); whether it is a
    usable schema is `RunSpec`'s check."""
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AgentsError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise AgentsError(f"{path}: a JSON Schema is a JSON object")
    return schema


def _schema_file(path: Path, where: str, table: dict[str, Any]) -> None:
    """`output_schema = "invoice.schema.json"`: the schema read from that file (relative to the
    definitions file), in place, so the definition carries the schema itself."""
    named = table.get("output_schema")
    if isinstance(named, str):
        try:
            table["output_schema"] = read_output_schema(path.parent / named)
        except AgentsError as exc:
            raise AgentsError(f"{where}: output_schema: {exc}") from None


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AgentsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise AgentsError(f"{path}: not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise AgentsError(f"{path}: expected a table of fields")
    return data


def _validate(where: str, data: dict[str, Any]) -> RunSpec:
    if (unknown := _unknown_key(RunSpec, data, "")) is not None:
        raise AgentsError(f"{where}: {unknown}")
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(the spec)"
        raise AgentsError(f"{where}: {field}: {first['msg']}") from None


def _unknown_key(model: type[BaseModel], data: Any, prefix: str) -> str | None:
    """The first key no field of `model` (or of a nested model) knows, with a suggestion."""
    if not isinstance(data, dict):
        return None
    fields = model.model_fields
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"unknown field {prefix + key!r}{hint}"
        nested = _model_of(fields[key].annotation)
        if nested is not None:
            values = value.values() if _is_mapping(fields[key].annotation) else [value]
            for item in values if isinstance(value, dict) else []:
                found = _unknown_key(nested, item, f"{prefix}{key}.")
                if found is not None:
                    return found
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _is_mapping(annotation: Any) -> bool:
    return get_origin(annotation) is dict
