"""The OpenAPI document of `capstan serve` as generated clients need it.

FastAPI writes the document from the routes' pydantic models; three things about it are shaped
here, in one place, so a client generated with any tool's default flags (`openapi-typescript`,
`openapi-python-client`) compiles and means what the server does:

- **Operation ids** are the endpoint's name in camelCase (`start_run` → `startRun`), never
  typed per route, so they are stable while the function keeps its name; two routes with one id
  fail the document's build.
- **Requests**: a field with a default is optional and its schema carries no `default` (the
  default is said in its description). Generators read `default` as "always present": one made
  every defaulted `RunSpec` field required; another sent every default back, so a body's
  `max_steps: 25` silently overrode the agent definition it named.
- **Responses**: every field of a model the API only sends is required (nullable where it may
  be null), because a response always carries every field. A schema that is both sent and
  received is shaped as a request.

Never changes what a route accepts or returns: only how the document describes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from fastapi.routing import APIRoute

__all__ = ["operation_id", "shape_document"]

Schema = dict[str, Any]
_PREFIX = "#/components/schemas/"


def operation_id(route: APIRoute) -> str:
    """The route's endpoint name in camelCase: `start_run` → `startRun`."""
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def shape_document(doc: Schema) -> Schema:
    """The document with unique operation ids, request fields optional with no `default`, and
    response fields required (in place; returned for convenience)."""
    operations = [op for path in doc.get("paths", {}).values() for op in path.values()]
    _check_unique(operations)
    schemas: dict[str, Schema] = doc.get("components", {}).get("schemas", {})
    sent = _closure(schemas, [op.get("requestBody", {}) for op in operations])
    answered = _closure(schemas, [op.get("responses", {}) for op in operations])
    for name in sent:
        _as_request(schemas[name])
    for name in answered - sent:
        _as_response(schemas[name])
    return doc


def _check_unique(operations: list[Schema]) -> None:
    seen: set[str] = set()
    for op in operations:
        name = op.get("operationId", "")
        if name in seen:
            raise ValueError(f"two API operations share the operation id {name!r}")
        seen.add(name)


def _closure(schemas: dict[str, Schema], roots: Iterable[object]) -> set[str]:
    """Names of the component schemas reachable from `roots` through `$ref`s."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_PREFIX):
                name = ref.removeprefix(_PREFIX)
                if name not in found and name in schemas:
                    found.add(name)
                    todo.append(schemas[name])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return found


def _as_request(schema: Schema) -> None:
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict) and "default" in prop:
            default = json.dumps(prop.pop("default"), ensure_ascii=False)
            said = prop.get("description", "").rstrip()
            prop["description"] = f"{said}\n\nDefault: `{default}`.".lstrip()


def _as_response(schema: Schema) -> None:
    if schema.get("properties"):
        schema["required"] = list(schema["properties"])
