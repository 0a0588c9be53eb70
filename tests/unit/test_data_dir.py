"""The data directory: explicit, else the project's, else the user's; found without creating."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.runtime.config import Settings
from capstan.runtime.data_dir import find_project, resolve_data_dir

ROOT = Path("/")  # no project above it (the tests skip where one is)


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    folder = tmp_path / "proj" / "src" / "pkg"
    folder.mkdir(parents=True)
    return folder


def test_an_explicit_directory_wins_and_is_made_absolute(deep: Path) -> None:
    (deep.parents[1] / "capstan.toml").write_text("")
    assert resolve_data_dir({"CAPSTAN_DATA_DIR": "data"}, deep) == deep / "data"
    assert resolve_data_dir({"CAPSTAN_DATA_DIR": "/x/y"}, deep) == Path("/x/y")


@pytest.mark.parametrize("marker", ["capstan.toml", ".capstan", "pyproject"])
def test_the_nearest_project_up_from_the_working_directory(deep: Path, marker: str) -> None:
    project = deep.parents[1]
    if marker == ".capstan":
        (project / ".capstan").mkdir()
    elif marker == "pyproject":
        (project / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.capstan]\n')
    else:
        (project / marker).write_text("")
    assert find_project(deep) == project
    assert resolve_data_dir({}, deep) == project / ".capstan"
    assert not (project / ".capstan").exists() or marker == ".capstan"  # found, not made


def test_a_pyproject_without_a_capstan_table_is_not_a_project(deep: Path) -> None:
    (deep / "pyproject.toml").write_text('[project]\nname = "p"\n[tool.ruff]\n')
    (deep.parent / "pyproject.toml").write_text("not [ toml")
    (deep.parents[1] / "capstan.toml").write_text("")
    assert find_project(deep) == deep.parents[1]


def test_without_a_project_the_users_directory(tmp_path: Path) -> None:
    if find_project(ROOT) is not None:
        pytest.skip("this machine has a Capstan project at /")
    env = {"HOME": str(tmp_path / "home")}
    assert resolve_data_dir(env, ROOT) == tmp_path / "home/.local/share/capstan"
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    assert resolve_data_dir(env, ROOT) == tmp_path / "xdg/capstan"
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_settings_from_env_resolve_it(deep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (deep.parents[1] / "capstan.toml").write_text("")
    monkeypatch.chdir(deep)
    assert Settings.from_env({}).data_dir == deep.parents[1] / ".capstan"
    assert Settings.from_env({"CAPSTAN_DATA_DIR": "/d"}).data_dir == Path("/d")
    assert Settings(task_queue="q").data_dir == Path(".capstan")  # direct: reads nothing
