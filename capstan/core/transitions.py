"""Every change of a run's phase, and its end, in one place (h11's rule: `h11/_state.py`).

Helpers decide and return verdicts, never a state in another phase: the gate returns the turn to
act on, the turn checks an `Act`, a `Nudge` or an `Ending`, context planning and the steering
fold an `Ending`. The loop applies them with the functions here, and nothing else in the core
writes `phase` or `ending` (`tests/unit/test_transitions.py` reads the core's source to keep it
so). `loop.next_effect` reads the state; `loop.apply` writes it.

| from | to | by | when |
|---|---|---|---|
| starting | thinking | `think` | the tools are listed and the model chain is described |
| thinking | acting | `act` | a reply's calls are gated, or refused at once (finish, cut off) |
| acting | thinking | `observe` | every call of the turn has its outcome |
| starting, thinking, acting | finished | `end` | the run ends, with exactly one terminal reason |

Any other move is a bug in an interpreter or in the loop and raises `IllegalTransitionError`;
so does ending a run twice, or an outcome arriving in a phase whose effects cannot produce it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import assert_never

from capstan.core.messages import Message
from capstan.core.spec import Phase
from capstan.core.state import Ending, RunState, Turn

__all__ = [
    "Act",
    "IllegalTransitionError",
    "Nudge",
    "Verdict",
    "act",
    "apply_verdict",
    "end",
    "expect",
    "observe",
    "think",
]

_MOVES: dict[Phase, tuple[Phase, ...]] = {
    "starting": ("thinking", "finished"),
    "thinking": ("acting", "finished"),
    "acting": ("thinking", "finished"),
    "finished": (),
}


class IllegalTransitionError(RuntimeError):
    """A move the table does not allow: a bug in an interpreter or in the loop."""


@dataclass(frozen=True)
class Act:
    """Verdict: go to `acting` with this turn."""

    turn: Turn


@dataclass(frozen=True)
class Nudge:
    """Verdict: stay in `thinking` and send these messages with the next model call."""

    messages: tuple[Message, ...]


Verdict = Ending | Act | Nudge


def expect(state: RunState, phases: tuple[Phase, ...], kind: str) -> None:
    """An outcome may only arrive in a phase whose effects produce it."""
    if state.phase not in phases:
        raise IllegalTransitionError(f"outcome {kind!r} arrived in phase {state.phase!r}")


def _move(state: RunState, to: Phase) -> None:
    if to not in _MOVES[state.phase]:
        raise IllegalTransitionError(f"no move from phase {state.phase!r} to {to!r}")


def think(state: RunState) -> RunState:
    """starting -> thinking: the run knows its tools and its models."""
    _move(state, "thinking")
    return replace(state, phase="thinking")


def act(state: RunState, turn: Turn) -> RunState:
    """thinking -> acting: this turn's calls are sorted (decided, waiting, or to run)."""
    _move(state, "acting")
    return replace(state, phase="acting", turn=turn)


def observe(state: RunState) -> RunState:
    """acting -> thinking: the turn is over (its results are the caller's to queue)."""
    _move(state, "thinking")
    return replace(state, phase="thinking", turn=Turn())


def end(state: RunState, ending: Ending) -> RunState:
    """-> finished, once: the state records why, so `status` shows it from now on."""
    _move(state, "finished")
    return replace(state, phase="finished", ending=ending)


def apply_verdict(state: RunState, verdict: Verdict) -> RunState:
    match verdict:
        case Ending():
            return end(state, verdict)
        case Act(turn=turn):
            return act(state, turn)
        case Nudge(messages=messages):
            pending = state.conversation.pending + messages
            return replace(state, conversation=replace(state.conversation, pending=pending))
        case _:
            assert_never(verdict)
