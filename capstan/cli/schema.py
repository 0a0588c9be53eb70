"""`capstan schema NAME`: the JSON Schema (draft 2020-12) of a wire shape other software sends.

So a Go or TypeScript Temporal client can steer a run (`steer`: the one signal and update every
steering input travels on) or start one (`run-spec`: a workflow's `RunSpec`) without reading
Python. The schemas are derived from the pydantic models themselves, never written by hand.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import BaseModel, TypeAdapter

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK
from capstan.core.spec import RunResult, RunSpec
from capstan.core.steering import STEER, SteeringInput

__all__ = ["SCHEMAS", "register", "schema_of"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"

#: name -> (what it is, the type it describes)
SCHEMAS: dict[str, tuple[str, Any]] = {
    "steer": (
        f"the payload of the `{STEER}` signal and update: one steering input, chosen by `kind`",
        SteeringInput,
    ),
    "run-spec": ("the input of one agent run (`RunSpec`)", RunSpec),
    "run-result": ("how a run ended: the workflow's result (`RunResult`)", RunResult),
}


def schema_of(name: str) -> dict[str, Any]:
    """The JSON Schema of one wire shape in `SCHEMAS`."""
    description, kind = SCHEMAS[name]
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    schema = adapter.json_schema()
    for definition in schema.get("$defs", {}).values():
        # the discriminator has a default in Python, but a client on the wire must send it
        if "kind" in definition.get("properties", {}):
            definition["required"] = sorted({*definition.get("required", ()), "kind"})
    title = kind.__name__ if isinstance(kind, type) and issubclass(kind, BaseModel) else name
    return {"$schema": _DRAFT, "title": title, "description": description, **schema}


async def cmd_schema(args: argparse.Namespace, settings: object) -> int:
    print(json.dumps(schema_of(args.name), indent=2))
    return EXIT_OK


def register(parsers: Parsers) -> None:
    p = parsers.add("schema", cmd_schema)
    p.add_argument("name", choices=sorted(SCHEMAS))
