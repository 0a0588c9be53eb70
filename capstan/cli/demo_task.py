"""The demo's task, and the variants `bench/demo_success.py` measures: copy the line of a file
into a new file, then finish with that line.

A task a 135M-parameter model can do when each call's schema narrows its choices to what exists
(`capstan.activities.providers.local_choices`): it still has to list or read, pick the file to
read, write the file the task names (not the one it read), and then finish. Each variant knows
its one right answer, so the demo and the bench say plainly whether what was written matches.
Never imports Temporal or starts anything: it only writes and reads the workspace it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capstan.core.spec import GuardPolicy

__all__ = ["DEMO_TASK", "GUARDS", "TOOLS", "VARIANTS", "CopyTask", "Verdict"]

#: The tools the demo offers: what the task needs, and few choices for a small model.
TOOLS = ("list_dir", "read_file", "write_file")
#: A finish before the write is refused once, with the reason (the model sees it).
GUARDS = GuardPolicy(finish_requires=("write_file",))


@dataclass(frozen=True)
class Verdict:
    """What the run left in the workspace, against the one right answer."""

    matched: bool
    written: str | None  # the target file's text (stripped), None when it was not written


@dataclass(frozen=True)
class CopyTask:
    """Copy the line of `source` into `target`.

    Example::

        task = CopyTask("notes.txt", "The crane lifts 42 containers an hour.")
        task.prepare(workspace)  # writes notes.txt, removes summary.txt
        task.check(workspace).matched
    """

    source: str
    line: str
    target: str = "summary.txt"

    @property
    def task(self) -> str:
        return (
            f"Copy the line of {self.source} into a new file {self.target}, "
            "then finish with that line."
        )

    @property
    def system(self) -> str:
        return (
            f"You are an agent that uses tools. Call read_file to read {self.source}, then "
            f"write_file to write {self.target}, then finish."
        )

    def prepare(self, workspace: Path) -> None:
        """Write the source file and remove a target left by an earlier run."""
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / self.source).write_text(self.line + "\n", encoding="utf-8")
        (workspace / self.target).unlink(missing_ok=True)

    def check(self, workspace: Path) -> Verdict:
        target = workspace / self.target
        if not target.is_file():
            return Verdict(matched=False, written=None)
        written = target.read_text(encoding="utf-8").strip()
        return Verdict(matched=written == self.line, written=written)


VARIANTS: tuple[CopyTask, ...] = (
    CopyTask("notes.txt", "The harbour crane lifts 42 containers an hour."),
    CopyTask("garden.txt", "The tomatoes need water every morning.", "todo.txt"),
    CopyTask("orders.txt", "Order 18: one oak table, delivered on Friday.", "next.txt"),
    CopyTask("weather.txt", "Tuesday: heavy rain expected after noon.", "alert.txt"),
    CopyTask("team.txt", "Chen fixes the printer on the second floor."),
    CopyTask("recipe.txt", "Mix two eggs with 200 grams of flour.", "step.txt"),
    CopyTask("trains.txt", "09:40 to York leaves from platform 5.", "ticket.txt"),
    CopyTask("library.txt", "Ulysses has been missing since March.", "report.txt"),
    CopyTask("server.log", "ERROR disk full on /var at 03:12", "incident.txt"),
    CopyTask("shopping.txt", "three green apples and a bag of rice", "list.txt"),
)

#: The variant `capstan demo` runs.
DEMO_TASK = VARIANTS[0]
