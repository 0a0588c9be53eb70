"""The worker's tool policy file (`CAPSTAN_POLICY`, TOML): the ceiling every run's own rules
narrow (`capstan.core.privilege`). Read once at start; a file that cannot be used is one
`ConfigError` line."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from capstan.core.errors import ConfigError
from capstan.core.spec import ToolRule
from capstan.runtime.environment import validation_summary

__all__ = ["load_policy"]


def load_policy(path: Path | None) -> dict[str, ToolRule]:
    """The worker's tool policy file (TOML): `[tools.NAME] decision = "ask"`, `deny_arguments`.

    Example::

        [tools.write_file]
        decision = "ask"
        deny_arguments = { path = "^secrets/" }
    """
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        tools = data.get("tools", {})
        return {name: ToolRule.model_validate(rule) for name, rule in tools.items()}
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"is not valid TOML: {exc}"
    except ValidationError as exc:
        problem = f"has an invalid rule: {validation_summary(exc)}"
    except (AttributeError, TypeError):
        problem = "is not a table of `[tools.NAME]` rules"
    raise ConfigError(f"CAPSTAN_POLICY={path}: the policy file {problem}")
