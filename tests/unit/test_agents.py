"""Agent definitions and spec files: resolved into a RunSpec, every mistake one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.client.agents import AgentsError, load_agents, load_spec, resolve_agent

AGENTS = """
[researcher]
system_prompt = "You read files and report what they say."
allowed_tools = ["list_dir", "read_file", "finish"]
max_steps = 30
budgets = { max_tool_calls = 40 }
tool_policy = { write_file = { decision = "deny" } }

[writer]
model = "anthropic"
"""


def write(tmp_path: Path, text: str, name: str = "agents.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_definition_becomes_the_whole_spec(tmp_path: Path) -> None:
    path = write(tmp_path, AGENTS)
    spec = resolve_agent(path, "researcher", "summarise notes.txt", run_id="r1")
    assert spec.task == "summarise notes.txt" and spec.run_id == "r1" and spec.agent == "researcher"
    assert spec.allowed_tools == ("list_dir", "read_file", "finish") and spec.max_steps == 30
    assert spec.budgets.max_tool_calls == 40 and spec.tool_policy["write_file"].decision == "deny"
    assert resolve_agent(path, "writer", "t", max_steps=3).max_steps == 3  # overrides win
    assert set(load_agents(path)) == {"researcher", "writer"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[a]\nmax_stepz = 3\n",
            "agent 'a': unknown field 'max_stepz' (did you mean 'max_steps'?)",
        ),
        ("[a]\nbudgets = { tool_calls = 3 }\n", "agent 'a': unknown field 'budgets.tool_calls'"),
        ("[a]\nmax_steps = 0\n", "agent 'a': max_steps: Input should be greater than or equal"),
        ("[a]\ntask = 'x'\n", "agent 'a': 'task' is given per run, not in a definition"),
        ("[a\n", "not valid TOML"),
        ("a = 1\n", "'a' is not a table of RunSpec fields"),
    ],
)
def test_mistakes_are_one_line_naming_file_agent_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(AgentsError) as err:
        resolve_agent(path, "a", "task")
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_agents_and_missing_files(tmp_path: Path) -> None:
    path = write(tmp_path, AGENTS)
    with pytest.raises(AgentsError, match="no agent 'nobody' \\(defined: researcher, writer\\)"):
        resolve_agent(path, "nobody", "t")
    with pytest.raises(AgentsError, match="cannot be read"):
        load_agents(tmp_path / "missing.toml")


def test_spec_files_in_toml_and_json(tmp_path: Path) -> None:
    toml = write(
        tmp_path, 'task = "t"\nmax_steps = 4\n[guards]\nidentical_call_abort = 2\n', "run.toml"
    )
    assert load_spec(toml).guards.identical_call_abort == 2
    js = write(tmp_path, '{"task": "t", "budgets": {"max_cost_usd": 0.5}}', "run.json")
    assert load_spec(js, max_steps=9).budgets.max_cost_usd == 0.5
    with pytest.raises(AgentsError, match=r"run\.json: task: Field required"):
        load_spec(write(tmp_path, "{}", "run.json"))
