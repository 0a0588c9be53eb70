"""`workflow.patched` over `capstan.core.patches.Patch`: the only way workflow code asks for a
patch, so an id is always one of the enum's (never a string typed in place), and a retired id
is never asked as live."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from capstan.core.patches import RETIRED, Patch

__all__ = ["deprecate", "patched"]


def patched(patch: Patch) -> bool:
    """True when this execution takes the branch `patch` gates (new code, or a history that
    recorded the marker)."""
    if patch in RETIRED:
        raise ValueError(f"patch {patch.value} is retired: it is deprecated, never asked")
    return workflow.patched(patch.value)


def deprecate(patch: Patch) -> None:
    """Record a retired patch's marker (`workflow.deprecate_patch`)."""
    if patch not in RETIRED:
        raise ValueError(f"patch {patch.value} is live: ask it with patched()")
    workflow.deprecate_patch(patch.value)
