"""Settings: every variable in one place, the Temporal connection as the `temporal` CLI reads it,
and every bad value a single line naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.service import TLSConfig

from capstan.activities.providers.profiles import ProfileError, resolve_profile
from capstan.runtime.config import ConfigError, ModelSettings, Settings
from capstan.runtime.temporal_connection import TemporalAccess, TemporalTLS

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY_PEM = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with an empty profile file, so no user's temporal.toml leaks in."""
    config = tmp_path / "temporal.toml"
    config.write_text("")
    return {"TEMPORAL_CONFIG_FILE": str(config)}


def one_line_error(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_defaults_are_the_embedded_server(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    assert settings.embedded and settings.address == "127.0.0.1:7233"
    assert settings.namespace == "default" and settings.task_queue == "capstan"
    assert settings.identity  # user@host when CAPSTAN_IDENTITY is unset
    assert settings.temporal.tls_option() is False


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("CAPSTAN_DATA_DIR", "/srv/capstan", "data_dir", Path("/srv/capstan")),
        ("CAPSTAN_TASK_QUEUE", "agents", "task_queue", "agents"),
        ("CAPSTAN_WORKSPACE", "/srv/ws", "workspace", Path("/srv/ws")),
        ("CAPSTAN_TOOLS", "pkg.tools", "tools_module", "pkg.tools"),
        ("CAPSTAN_TEMPORAL_PORT", "7999", "embedded_port", 7999),
        ("CAPSTAN_POLICY", "policy.toml", "policy_file", Path("policy.toml")),
        ("CAPSTAN_IDENTITY", "ops@ci", "identity", "ops@ci"),
        ("CAPSTAN_FINISH_GUARD", "pkg.mod:fn", "finish_guard", "pkg.mod:fn"),
    ],
)
def test_each_capstan_variable_sets_its_field(
    env: dict[str, str], variable: str, value: str, field: str, expected: object
) -> None:
    assert getattr(Settings.from_env({**env, variable: value}), field) == expected


def test_an_empty_variable_counts_as_unset(env: dict[str, str]) -> None:
    settings = Settings.from_env({**env, "CAPSTAN_TEMPORAL_PORT": "", "TEMPORAL_ADDRESS": ""})
    assert settings.embedded and settings.embedded_port == 7233


def test_direct_construction_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSTAN_DATA_DIR", "/elsewhere")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "elsewhere:7233")
    settings = Settings(task_queue="q")
    assert settings.data_dir == Path(".capstan") and settings.embedded
    assert Settings.from_env().data_dir == Path("/elsewhere")  # from_env() reads os.environ


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CAPSTAN_TEMPORAL_PORT", "abc"),
        ("CAPSTAN_TEMPORAL_PORT", "70000"),
        ("TEMPORAL_TLS", "maybe"),
        ("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "true"),
        ("TEMPORAL_CONFIG_FILE", "/no/such/temporal.toml"),
        ("TEMPORAL_PROFILE", "prod"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    env: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({**env, variable: value})
    assert f"{variable}={value}" in one_line_error(err)


def test_malformed_profile_file_is_one_line_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text("[profile.default\naddress = 1\n")
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(config)})
    message = one_line_error(err)
    assert str(config) in message and "line 1" in message


def test_connection_variables(env: dict[str, str]) -> None:
    settings = Settings.from_env(
        {
            **env,
            "TEMPORAL_ADDRESS": "temporal.example:7233",
            "TEMPORAL_NAMESPACE": "agents",
            "TEMPORAL_API_KEY": "tk-secret",
            "TEMPORAL_GRPC_META_X_TEAM": "blue",
        }
    )
    assert not settings.embedded and settings.address == "temporal.example:7233"
    assert settings.namespace == "agents"
    access = settings.temporal
    assert access.api_key is not None and access.api_key.get_secret_value() == "tk-secret"
    assert access.tls_option() is True  # an API key alone means TLS with the system's roots
    assert access.grpc_meta == {"x-team": "blue"}
    assert "tk-secret" not in repr(settings) and "blue" not in repr(settings)


def test_tls_variables(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    settings = Settings.from_env(
        {
            **env,
            "TEMPORAL_ADDRESS": "h:7233",
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(tmp_path / "ca.pem"),
            "TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
            "TEMPORAL_TLS_CLIENT_CERT_DATA": PEM.decode(),
            "TEMPORAL_TLS_CLIENT_KEY_DATA": KEY_PEM.decode(),
        }
    )
    tls = settings.temporal.tls_option()
    assert isinstance(tls, TLSConfig)
    assert (tls.server_root_ca_cert, tls.domain) == (PEM, "temporal.internal")
    assert (tls.client_cert, tls.client_private_key) == (PEM, KEY_PEM)
    assert "PRIVATE KEY" not in repr(settings)
    off = Settings.from_env({**env, "TEMPORAL_API_KEY": "k", "TEMPORAL_TLS": "false"})
    assert off.temporal.tls_option() is False


def test_profile_file_with_env_overrides(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.prod]\naddress = "prod.example:7233"\nnamespace = "prod-ns"\n'
        'api_key = "file-key"\n[profile.prod.tls]\n'
        f'server_ca_cert_path = "{tmp_path / "ca.pem"}"\nserver_name = "prod.internal"\n'
    )
    env = {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "prod"}
    settings = Settings.from_env(env)
    assert (settings.address, settings.namespace) == ("prod.example:7233", "prod-ns")
    assert settings.temporal.profile == "prod" and settings.temporal.api_key is not None
    tls = settings.temporal.tls_option()
    assert isinstance(tls, TLSConfig) and tls.domain == "prod.internal"
    assert tls.server_root_ca_cert == PEM
    overridden = Settings.from_env({**env, "TEMPORAL_NAMESPACE": "other"})
    assert overridden.namespace == "other"  # variables win over the file, as for the CLI


def test_missing_or_bad_certificates_are_one_line(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    settings = Settings.from_env({**env, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(missing)})
    with pytest.raises(ConfigError) as err:
        settings.temporal.tls_option()
    message = one_line_error(err)
    assert str(missing) in message and "TEMPORAL_TLS_SERVER_CA_CERT_PATH" in message
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk = Settings.from_env(
        {**env, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(tmp_path / "junk.pem")}
    )
    with pytest.raises(ConfigError, match="is not PEM"):
        junk.temporal.tls_option()


def test_client_certificate_without_key(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_bytes(PEM)
    settings = Settings.from_env({**env, "TEMPORAL_TLS_CLIENT_CERT_PATH": str(tmp_path / "c.pem")})
    with pytest.raises(ConfigError) as err:
        settings.temporal.tls_option()
    assert "TEMPORAL_TLS_CLIENT_KEY_PATH" in one_line_error(err)


def test_access_defaults_connect_in_plaintext() -> None:
    assert TemporalAccess().tls_option() is False
    assert TemporalAccess(tls=TemporalTLS(enabled=False)).tls_option() is False


# Model settings --------------------------------------------------------------------------------


def test_model_settings_reach_the_profile() -> None:
    env = {
        "CAPSTAN_MODEL": "openai:m",
        "CAPSTAN_MODEL_TIMEOUT": "7.5",
        "CAPSTAN_STREAM": "0",
        "OPENAI_BASE_URL": "http://h/v1/",
        "OPENAI_API_KEY": "sk-secret-1",
    }
    settings = ModelSettings.from_env(env)
    assert (settings.model, settings.request_timeout, settings.stream) == ("openai:m", 7.5, False)
    profile = resolve_profile("default", env, settings=settings)
    assert (profile.request_timeout, profile.stream, profile.base_url) == (
        7.5,
        False,
        "http://h/v1",
    )
    assert profile.api_key is not None  # the key is read from env at the edge, not a setting
    assert "sk-secret-1" not in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CAPSTAN_MODEL_TIMEOUT", "soon"),
        ("CAPSTAN_MODEL_TIMEOUT", "0"),
        ("CAPSTAN_STREAM", "maybe"),
        ("CAPSTAN_LOCAL_MODEL_PORT", "x"),
    ],
)
def test_bad_model_setting_is_one_line(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        ModelSettings.from_env({variable: value})
    assert f"{variable}={value}" in one_line_error(err)
    with pytest.raises(ProfileError, match=variable):  # as the activity reports it
        resolve_profile("openai:m", {variable: value})


# The worker's files and hooks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read"),
        ("[tools.write_file\n", "is not valid TOML"),
        ('[tools.write_file]\ndecision = "perhaps"\n', "has an invalid rule"),
    ],
)
def test_bad_policy_file_is_one_line(tmp_path: Path, content: str | None, problem: str) -> None:
    from capstan.host.policy_file import load_policy

    path = tmp_path / "policy.toml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    message = one_line_error(err)
    assert f"CAPSTAN_POLICY={path}" in message and problem in message


def test_bad_hooks_are_one_line() -> None:
    from capstan.host.user_code import build_registry, load_finish_guard

    with pytest.raises(ConfigError) as err:
        build_registry("no_such_package.tools")
    assert "CAPSTAN_TOOLS=no_such_package.tools" in one_line_error(err)
    with pytest.raises(ConfigError) as err:
        load_finish_guard("json:no_such_function")
    assert "CAPSTAN_FINISH_GUARD=json:no_such_function" in one_line_error(err)
