"""The one exception tree of Capstan: every error it raises on purpose derives from
`CapstanError`, so a caller (the CLI, the worker's start, a program) catches one root, or one
branch, never a tuple of unrelated classes. Each message is one line naming what to change.

    CapstanError                       an error Capstan raises on purpose
    ├── ConfigError (ValueError)       a setting, variable or file that cannot be used
    │   └── CodecError                 no key, or the wrong one, for an encrypted payload
    ├── ConnectError (ConnectionError) a server Capstan needs cannot be reached or started
    │   ├── TemporalConnectError       Temporal refused or did not answer
    │   ├── EmbeddedServerError        the embedded dev server could not start
    │   └── LocalModelError            the bundled model's server could not start
    ├── SteeringError                  an input a run could not take
    │   ├── RejectedError              the run refused a validated input (nothing written)
    │   └── UpdateTimeoutError         no worker answered in time (resending is safe)
    ├── StoreError                     the content store
    │   └── BlobError                  (its own tree: capstan.runtime.blobstore)
    ├── RunNotFoundError, ThreadError, ScheduleError, AgentsError   (capstan.client)
    └── CliError                       a command that cannot go on (capstan.cli)

The leaves live beside the code that raises them; this module holds the root and the
branches, so any layer (the pure core included) can name them. Never: import anything here.
"""

from __future__ import annotations

__all__ = ["CapstanError", "ConfigError", "ConnectError", "SteeringError", "StoreError"]


class CapstanError(Exception):
    """An error Capstan raises on purpose; its message is one line naming what to change."""


class ConfigError(CapstanError, ValueError):
    """A setting, variable or configuration file that cannot be used; the message is one line
    naming it and what is wrong."""


class ConnectError(CapstanError, ConnectionError):
    """A server Capstan needs (Temporal, the embedded server, the local model) cannot be
    reached or started."""


class SteeringError(CapstanError):
    """A steering call that could not be made (e.g. which request to decide is ambiguous)."""


class StoreError(CapstanError):
    """The content store (blobs) could not give or keep what was asked."""
