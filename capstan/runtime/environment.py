"""Reading a group of settings from an environment, with pydantic-settings, in one line per error.

A settings class declares each variable as a field whose `validation_alias` is the variable's
name (`CAPSTAN_DATA_DIR`); only those fields are read. `from_env(env)` reads any mapping — the
process environment by default, or the worker's environment after the local model server was
wired in, or a test's dict — and treats an empty variable as unset. Constructing a class
directly (`Settings(data_dir=...)`) reads nothing, so tests and embedders get exactly what they
pass. A value that does not parse raises `ConfigError` naming the variable, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Self

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from capstan.core.errors import ConfigError

__all__ = ["ConfigError", "EnvSettings", "validation_summary", "variables_of"]


class _MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # the one hook EnvSettingsSource reads its variables through (case-insensitive names)
        return {name.lower(): value for name, value in self._given.items() if value != ""}


def variables_of(cls: type[BaseSettings]) -> dict[str, str]:
    """Field name -> variable name, for the fields read from the environment."""
    return {
        name: field.validation_alias
        for name, field in cls.model_fields.items()
        if isinstance(field.validation_alias, str)
    }


def validation_summary(exc: ValidationError, variables: Mapping[str, str] | None = None) -> str:
    """A pydantic error (one line per problem) as one line: `NAME=value: what is wrong; ...`.
    With `variables` the first location part is a field, reported as its variable."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        if variables is not None and loc:
            loc[0] = variables.get(loc[0], loc[0])
            problems.append(f"{'.'.join(loc)}={error.get('input')!s}: {error['msg']}")
        else:
            problems.append(f"{'.'.join(loc) or 'value'}: {error['msg']}")
    return "; ".join(problems).replace("\n", " ")


class EnvSettings(BaseSettings):
    """Base of every settings group: fields named by variable, read only by `from_env`."""

    model_config = SettingsConfigDict(populate_by_name=True, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # the environment is read by `from_env` alone

    @classmethod
    def environment_values(cls, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The raw values of this group's variables found in `env` (default: the process's)."""
        aliases = set(variables_of(cls).values())
        found = _MappingSource(cls, os.environ if env is None else env)()
        return {key: value for key, value in found.items() if key in aliases}

    @classmethod
    def validated(cls, **values: Any) -> Self:
        """`cls(**values)`, with a bad value reported as one `ConfigError` line."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(validation_summary(exc, variables_of(cls))) from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        return cls.validated(**cls.environment_values(env))
