"""The names of the tools the loop itself knows (it finishes a run, asks a person, points the
model at stored text): one place, imported by every module that names them. A leaf: it imports
nothing, so the lowest core modules (`limits`) can use it."""

from __future__ import annotations

__all__ = ["ASK_USER_TOOL", "FINISH_TOOL", "READ_RESULT_TOOL"]

FINISH_TOOL = "finish"
ASK_USER_TOOL = "ask_user"
READ_RESULT_TOOL = "read_result"
