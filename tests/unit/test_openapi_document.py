"""The OpenAPI document's contract for generated clients (no server: the app's document only).
The generators themselves run in tests/integration/test_generated_clients.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.routing import APIRoute

from capstan.api.app import create_app
from capstan.api.auth import TokenStore
from capstan.api.document import operation_id, shape_document
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return create_app(Settings(), ApiSettings(), tokens=TokenStore({})).openapi()


def ops(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), p): op for p, path in doc["paths"].items() for m, op in path.items()}


def test_operation_ids_are_camel_case_names_of_the_endpoints(doc: dict[str, Any]) -> None:
    ids = {key: op["operationId"] for key, op in ops(doc).items()}
    assert ids[("POST", "/api/runs")] == "startRun"
    assert ids[("GET", "/api/runs")] == "listRuns"
    assert ids[("GET", "/api/runs/{run_id}")] == "getRun"
    assert ids[("GET", "/api/runs/{run_id}/pending")] == "getPending"
    assert ids[("POST", "/api/runs/{run_id}/approve")] == "approve"
    assert ids[("POST", "/api/runs/{run_id}/deny")] == "deny"
    assert ids[("POST", "/api/runs/{run_id}/grant-budget")] == "grantBudget"
    assert len(set(ids.values())) == len(ids)
    assert all(re.fullmatch(r"[a-z]+([A-Z][a-z]+)*", i) for i in ids.values()), ids


def test_request_fields_with_defaults_are_optional_without_a_default(
    doc: dict[str, Any],
) -> None:
    request = doc["components"]["schemas"]["RunRequest"]
    assert request["required"] == ["task"]
    assert not [name for name, p in request["properties"].items() if "default" in p]
    assert "Default: `25`" in request["properties"]["max_steps"]["description"]


def test_every_field_of_an_answer_is_required(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    for name in ("RunStatusView", "SteerResult", "PendingView", "RunSummary", "Usage", "StepView"):
        assert set(schemas[name]["required"]) == set(schemas[name]["properties"]), name


def test_two_routes_with_one_id_fail_the_document() -> None:
    async def start_run() -> None:
        return None

    route = APIRoute("/x", start_run)
    assert operation_id(route) == "startRun"
    same = {"operationId": "startRun"}
    doc = {"paths": {"/a": {"get": same}, "/b": {"post": dict(same)}}}
    with pytest.raises(ValueError, match="startRun"):
        shape_document(doc)
