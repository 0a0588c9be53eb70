"""Worker and client configuration, read from the environment in one place.

Only edge code (CLI, client, worker) calls `Settings.from_env()`. Secrets (API keys) are not
read here: providers read them inside activities, so they can never reach a workflow input.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

__all__ = ["DEFAULT_PORT", "Settings"]

DEFAULT_PORT = 7233


class Settings(BaseModel):
    """Where things are. Every field has an environment variable; see the README."""

    data_dir: Path = Path(".capstan")
    temporal_address: str | None = None
    namespace: str = "default"
    task_queue: str = "capstan"
    workspace: Path | None = None
    tools_module: str | None = None
    embedded_port: int = DEFAULT_PORT
    policy_file: Path | None = None
    identity: str = ""
    finish_guard: str | None = None

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        workspace = env.get("CAPSTAN_WORKSPACE")
        return cls(
            data_dir=Path(env.get("CAPSTAN_DATA_DIR", ".capstan")),
            temporal_address=env.get("TEMPORAL_ADDRESS") or None,
            namespace=env.get("TEMPORAL_NAMESPACE", "default"),
            task_queue=env.get("CAPSTAN_TASK_QUEUE", "capstan"),
            workspace=Path(workspace) if workspace else None,
            tools_module=env.get("CAPSTAN_TOOLS") or None,
            embedded_port=int(env.get("CAPSTAN_TEMPORAL_PORT", DEFAULT_PORT)),
            policy_file=Path(env["CAPSTAN_POLICY"]) if env.get("CAPSTAN_POLICY") else None,
            identity=env.get("CAPSTAN_IDENTITY") or _default_identity(),
            finish_guard=env.get("CAPSTAN_FINISH_GUARD") or None,
        )

    @property
    def address(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.embedded_port}"

    @property
    def embedded(self) -> bool:
        return self.temporal_address is None

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def workspace_dir(self) -> Path:
        return self.workspace or self.data_dir / "workspace"


def _default_identity() -> str:
    """`user@host`: recorded with every decision a client sends."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
