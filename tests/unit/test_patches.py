"""Patch ids: one enum, and the README's table of them says the same (ids never renamed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from capstan.core.patches import RETIRED, Patch

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\s*\| `([a-z0-9-]+)` \| (live|retired) \|", re.MULTILINE)


def test_the_readme_lists_every_patch_and_its_state() -> None:
    listed = dict(ROW.findall(README.read_text()))
    assert listed == {p.value: "retired" if p in RETIRED else "live" for p in Patch}


def test_ids_are_versioned_and_unique() -> None:
    assert len({p.value for p in Patch}) == len(Patch)
    assert all(re.fullmatch(r"[a-z-]+-v\d+", p.value) for p in Patch)


def test_workflow_code_names_patches_only_through_the_enum() -> None:
    """No `workflow.patched("...")` or `deprecate_patch` with a string outside `patching.py`."""
    folder = Path(__file__).resolve().parents[2] / "workflows"
    for source in folder.glob("*.py"):
        if source.name == "patching.py":
            continue
        text = source.read_text()
        assert "workflow.patched(" not in text and "deprecate_patch(" not in text, source.name


def test_a_retired_patch_cannot_be_asked_as_live() -> None:
    from capstan.workflows.patching import deprecate, patched

    with pytest.raises(ValueError, match="retired"):
        patched(Patch.GUARDS)
    with pytest.raises(ValueError, match="live"):
        deprecate(Patch.LIMITS)
