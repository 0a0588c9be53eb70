"""`delegates` in agent definitions: the tree's definitions are embedded, down to the depth."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.client.agents import AgentsError, resolve_agent

TREE = """
[lead]
system_prompt = "You lead."
delegates = ["researcher", "writer"]

[researcher]
system_prompt = "You research."
allowed_tools = ["list_dir"]
delegates = ["researcher"]

[writer]
system_prompt = "You write."
budgets = { max_tool_calls = 3 }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return path


def test_delegates_are_embedded_down_to_the_depth_limit(tmp_path: Path) -> None:
    spec = resolve_agent(write(tmp_path, TREE), "lead", "lead the work")
    assert sorted(spec.delegates) == ["researcher", "writer"]
    researcher = spec.delegates["researcher"]
    assert researcher.system_prompt == "You research." and researcher.agent == "researcher"
    assert researcher.allowed_tools == ("list_dir",)
    assert spec.delegates["writer"].budgets.max_tool_calls == 3
    # depth 0 -> 1 -> 2: the researcher's own researcher is embedded, and stops there
    assert list(researcher.delegates) == ["researcher"]
    assert researcher.delegates["researcher"].delegates == {}


def test_max_depth_bounds_the_embedding(tmp_path: Path) -> None:
    path = write(tmp_path, TREE)
    assert resolve_agent(path, "lead", "t", max_depth=1).delegates["researcher"].delegates == {}
    assert resolve_agent(path, "lead", "t", max_depth=0).delegates == {}
    assert resolve_agent(path, "writer", "t").delegates == {}


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('delegates = ["nobody"]', "agent 'lead': delegates: no agent 'nobody' (defined: lead)"),
        ('delegates = "writer"', "agent 'lead': delegates: expected a list of agent names"),
        ("depth = 1", "agent 'lead': 'depth' is given per run, not in a definition"),
    ],
)
def test_bad_delegates_name_the_file_agent_and_field(
    tmp_path: Path, table: str, problem: str
) -> None:
    path = write(tmp_path, f"[lead]\n{table}\n")
    with pytest.raises(AgentsError) as caught:
        resolve_agent(path, "lead", "t")
    assert str(caught.value) == f"{path}: {problem}"
