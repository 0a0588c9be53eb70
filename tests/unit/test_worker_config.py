"""A worker's configuration is read once (`capstan.host.config.load_worker_config`) and the
worker is built from what it holds: `build_worker` reads no file and no variable again, and a
mistake in any part is one `ConfigError` line before anything connects."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import httpx
import pytest
from temporalio.client import Client

from capstan.core.errors import ConfigError
from capstan.host.build_id import build_id
from capstan.host.config import load_worker_config
from capstan.runtime.config import Settings
from capstan.worker import build_worker


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "temporal.toml"
    config.write_text("")
    return {
        "TEMPORAL_CONFIG_FILE": str(config),
        "CAPSTAN_DATA_DIR": str(tmp_path / "data"),
        "CAPSTAN_MODEL": "openai:gpt-4o-mini",
        "OPENAI_API_KEY": "sk-test",
    }


def test_the_parts_are_read_once_and_the_worker_built_from_them(
    env: dict[str, str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.write_file]\ndecision = "deny"\n')
    hooks = tmp_path / "hooks.toml"
    hooks.write_text('[hooks.ops]\nurl = "http://127.0.0.1:9/hook"\nformat = "slack"\n')
    settings = Settings.from_env(
        {**env, "CAPSTAN_POLICY": str(policy), "CAPSTAN_WEBHOOKS": str(hooks)}
    )
    config = load_worker_config(settings, env, jail=False)
    assert config.policy["write_file"].decision == "deny"
    assert [h.name for h in config.hooks.hooks] == ["ops"]
    assert "read_file" in config.registry.names() and "run_shell" not in config.registry.names()
    assert config.build_id == build_id() and config.build_id.startswith("capstan-")
    policy.unlink()  # gone after the load: building must not read it again
    hooks.unlink()
    client = mock.Mock(spec=Client)
    client.config.return_value = {}
    with mock.patch("capstan.worker.Worker") as worker_class:
        build_worker(client, config, httpx.AsyncClient())
    options = worker_class.call_args.kwargs
    assert options["build_id"] == config.build_id
    assert options["task_queue"] == settings.task_queue


@pytest.mark.parametrize(
    ("variable", "content", "says"),
    [
        ("CAPSTAN_POLICY", "[tools.write_file]\ndecision = 'maybe'\n", "CAPSTAN_POLICY="),
        ("CAPSTAN_WEBHOOKS", "[hooks.x]\nurl_env = 'NOPE'\nformat = 'slack'\n", "NOPE"),
        ("CAPSTAN_MCP", "[servers.x]\ncommand = ", "CAPSTAN_MCP="),
    ],
)
def test_a_broken_part_is_one_line(
    env: dict[str, str], tmp_path: Path, variable: str, content: str, says: str
) -> None:
    path = tmp_path / "part.toml"
    path.write_text(content)
    settings = Settings.from_env({**env, variable: str(path)})
    with pytest.raises(ConfigError) as caught:
        load_worker_config(settings, env, jail=False)
    message = str(caught.value)
    assert "\n" not in message and says in message, message
