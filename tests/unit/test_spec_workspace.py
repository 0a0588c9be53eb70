"""`RunSpec.workspace` holds plain names only, for every caller (a Python caller included)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from capstan.core.spec import RunSpec


@pytest.mark.parametrize("key", ["..", "../other", "/abs", "a//b", "a/./b", ".hidden", "a\x00b"])
def test_a_hostile_workspace_key_is_refused_at_validation(key: str) -> None:
    with pytest.raises(ValidationError, match="workspace key"):
        RunSpec(task="x", workspace=key)


def test_a_tenant_and_thread_key_is_kept() -> None:
    assert RunSpec(task="x", workspace="acme/threads/t1").workspace == "acme/threads/t1"
