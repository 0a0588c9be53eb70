"""The published wire shape of `steer` (`capstan schema steer`) is the one the workflow applies:
the README's examples validate against it, the hostile payloads do not, and for arbitrary JSON
whatever the schema accepts the workflow applies (so a Go or TypeScript client that validates
against the schema is never surprised by a diagnostic). The workflow may accept more than the
schema says (pydantic's lax mode takes `"steps": "5"`); the schema is the contract to write to."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.helpers import ROOT
from tests.integration.test_steer_contract import HOSTILE, JSON, NEAR_INPUTS
from tests.integration.test_steer_contract import _valid as _decodes


def _schema() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "capstan", "schema", "steer"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    schema: dict[str, Any] = json.loads(done.stdout)
    return schema


VALIDATOR = jsonschema.Draft202012Validator(_schema())


def test_the_schema_is_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(VALIDATOR.schema)


def test_the_readmes_examples_are_valid_steer_inputs() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = re.findall(r"--name steer \\?\s*--input '([^']*)'", readme)
    assert len(examples) >= 3, examples
    for text in examples:
        payload = json.loads(text)
        assert VALIDATOR.is_valid(payload), text
        assert _decodes(payload), text


def test_the_hostile_payloads_are_refused_by_the_schema() -> None:
    for payload in HOSTILE:
        assert not VALIDATOR.is_valid(payload), payload


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON, NEAR_INPUTS))
def test_what_the_schema_accepts_the_workflow_applies(payload: object) -> None:
    if VALIDATOR.is_valid(payload):
        assert _decodes(payload), payload
