"""`POST /api/runs` holds the same contract as `RunSpec`: unknown fields are refused with a
suggestion, and the fields Capstan sets itself are not part of the public request."""

from __future__ import annotations

import pytest

from capstan.core.spec import INTERNAL_FIELDS
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, ROOT, api_client, app_for, auth

pytestmark = pytest.mark.server


async def test_unknown_and_internal_fields_are_refused(agent: Agent) -> None:
    async with api_client(app_for(agent.client)) as http:
        r = await http.post("/api/runs", json={"task": "x", "max_step": 3}, headers=auth(ALICE))
        assert r.status_code == 422, r.text
        assert "unknown field 'max_step' (did you mean 'max_steps'?)" in r.text
        r = await http.post(
            "/api/runs", json={"task": "x", "budgets": {"max_tool_call": 1}}, headers=auth(ALICE)
        )
        assert r.status_code == 422 and "did you mean 'max_tool_calls'" in r.text, r.text
        for name in sorted(INTERNAL_FIELDS):
            for token in (ALICE, ROOT):
                r = await http.post(
                    "/api/runs", json={"task": "x", name: None}, headers=auth(token)
                )
                assert r.status_code == 422, (name, r.text)
                assert f"unknown field {name!r}" in r.text
        document = (await http.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    request = schemas["RunRequest"]
    assert request["additionalProperties"] is False
    assert request["required"] == ["task"]
    assert INTERNAL_FIELDS.isdisjoint(request["properties"])
    assert {"max_steps", "tool_policy", "sandbox"} <= set(request["properties"])
