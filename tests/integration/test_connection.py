"""The Temporal connection for real: TLS and mTLS through a TLS-terminating proxy in front of the
session's dev server, configured by `TEMPORAL_*` variables or a `temporal.toml` profile, and every
wrong setting a single line — in process, from the `capstan` CLI and from the worker."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from capstan.client.runs import CapstanClient, connect_temporal
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import ConfigError, Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.runtime.temporal_connection import TemporalConnectError
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import ROOT, running_worker
from tests.integration.tls_proxy import Certificates, make_certificates, tls_proxy

pytestmark = [pytest.mark.server]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def base_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    """The test's data dir and task queue, and an empty profile file of its own."""
    config = tmp_path / "temporal.toml"
    config.write_text("")
    return {
        "TEMPORAL_CONFIG_FILE": str(config),
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_IDENTITY": "tester@ci",
    }


async def capstan(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """Run `python -m <args>` as a user would, with only `env` configuring Capstan and Temporal."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "CAPSTAN_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        env={**clean, **env},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def single_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


async def test_run_through_tls_with_the_ca_from_variables(
    dev_server: EmbeddedServer, certs: Certificates, base_env: dict[str, str]
) -> None:
    async with tls_proxy(dev_server.address, certs) as address:
        env = {
            **base_env,
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
        }
        settings = Settings.from_env(env)
        client = await CapstanClient.connect(settings)
        with FakeProvider([say(call("finish", answer="over tls"))]) as fake:
            async with running_worker(client.client, settings, fake):
                result = await client.result(await client.start_run(RunSpec(task="t")))
        assert result.terminal_reason is TerminalReason.COMPLETED
        assert result.output == "over tls"
        code, out, err = await capstan(env, "capstan", "ls", "--json")
        assert code == 0, err
        assert result.run_id in out


def write_profile(path: Path, address: str, certs: Certificates) -> None:
    """A `temporal.toml` profile `secure`: mTLS, an API key and the name the certificate holds."""
    path.write_text(
        f'[profile.secure]\naddress = "{address}"\napi_key = "tk-test-123"\n'
        f'[profile.secure.tls]\nserver_ca_cert_path = "{certs.ca}"\n'
        f'client_cert_path = "{certs.client_cert}"\nclient_key_path = "{certs.client_key}"\n'
        'server_name = "localhost"\n'
    )


async def test_mtls_and_api_key_from_a_profile_file(
    dev_server: EmbeddedServer, certs: Certificates, base_env: dict[str, str]
) -> None:
    async with tls_proxy(dev_server.address, certs, require_client_cert=True) as address:
        write_profile(Path(base_env["TEMPORAL_CONFIG_FILE"]), address, certs)
        env = {**base_env, "TEMPORAL_PROFILE": "secure"}
        client = await CapstanClient.connect(Settings.from_env(env))
        assert client.client.api_key == "tk-test-123"
        run_id = await client.start_run(RunSpec(task="no worker needed"))
        assert (await client.describe(run_id)).id == run_id
        code, _, err = await capstan(env, "capstan", "ls")
        assert code == 0, err
        # the same endpoint without a client certificate is refused, in one line
        no_cert = {
            **base_env,
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
        }
        code, _, err = await capstan(no_cert, "capstan", "ls")
        assert code == 2 and "may require a client certificate" in single_line(err)


async def test_wrong_ca_is_one_line(
    dev_server: EmbeddedServer, certs: Certificates, base_env: dict[str, str]
) -> None:
    async with tls_proxy(dev_server.address, certs) as address:
        env = {
            **base_env,
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.wrong_ca),
        }
        with pytest.raises(TemporalConnectError) as err:
            await connect_temporal(Settings.from_env(env))
        assert "not signed by" in str(err.value) and str(certs.wrong_ca) in str(err.value)
        code, _, stderr = await capstan(env, "capstan", "ls")
        line = single_line(stderr)
        assert code == 2 and str(certs.wrong_ca) in line and "TEMPORAL_TLS_SERVER_CA_CERT" in line
        code, _, stderr = await capstan(env, "capstan.worker")
        assert code == 2 and "Traceback" not in stderr
        assert str(certs.wrong_ca) in stderr.strip().splitlines()[-1]


async def test_tls_to_a_plaintext_server_and_back(
    dev_server: EmbeddedServer, certs: Certificates, base_env: dict[str, str]
) -> None:
    tls_to_plain = {
        **base_env,
        "TEMPORAL_ADDRESS": dev_server.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
    }
    with pytest.raises(TemporalConnectError, match="does not speak TLS"):
        await connect_temporal(Settings.from_env(tls_to_plain))
    async with tls_proxy(dev_server.address, certs) as address:
        with pytest.raises(TemporalConnectError, match="may require TLS"):
            await connect_temporal(Settings.from_env({**base_env, "TEMPORAL_ADDRESS": address}))


async def test_missing_key_file_is_one_line(certs: Certificates, base_env: dict[str, str]) -> None:
    missing = certs.client_key.with_name("gone.key")
    env = {
        **base_env,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(certs.client_cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(missing),
    }
    with pytest.raises(ConfigError):
        await connect_temporal(Settings.from_env(env))
    code, _, stderr = await capstan(env, "capstan", "ls")
    line = single_line(stderr)
    assert code == 2 and str(missing) in line and "cannot be read" in line


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"CAPSTAN_TEMPORAL_PORT": "abc"}, "CAPSTAN_TEMPORAL_PORT=abc"),
        ({"TEMPORAL_ADDRESS": "127.0.0.1:1"}, "no Temporal server answers at 127.0.0.1:1"),
        ({"TEMPORAL_ADDRESS": "127.0.0.1:1", "TEMPORAL_TLS": "true"}, "no Temporal server"),
        ({"TEMPORAL_PROFILE": "nope"}, "TEMPORAL_PROFILE=nope"),
    ],
)
async def test_cli_settings_errors_are_one_line(
    base_env: dict[str, str], variables: dict[str, str], expected: str
) -> None:
    code, _, stderr = await capstan({**base_env, **variables}, "capstan", "ls")
    assert code == 2 and expected in single_line(stderr)


async def test_worker_refuses_a_bad_policy_in_one_line(
    dev_server: EmbeddedServer, base_env: dict[str, str], tmp_path: Path
) -> None:
    env = {
        **base_env,
        "TEMPORAL_ADDRESS": dev_server.address,
        "CAPSTAN_POLICY": str(tmp_path / "missing.toml"),
    }
    code, _, stderr = await capstan(env, "capstan.worker")
    assert code == 2 and "Traceback" not in stderr
    assert f"CAPSTAN_POLICY={tmp_path / 'missing.toml'}" in stderr.strip().splitlines()[-1]
    code, _, stderr = await capstan(env, "capstan", "worker")
    assert code == 2 and "CAPSTAN_POLICY=" in single_line(stderr)
