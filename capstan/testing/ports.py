"""Free loopback ports for the servers a test starts (Temporal, `capstan serve`, fakes).

Light on purpose (no Capstan import): a test session's conftest imports it first.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
