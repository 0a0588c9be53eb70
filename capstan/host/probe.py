"""`python -m capstan.host.probe [--live]`: ask this host's worker health endpoint, exit 0/1.

For a container's HEALTHCHECK or an exec probe, where no curl is installed. It runs every few
seconds for the life of the container, so it imports the standard library only — not the worker,
not pydantic — and reads the port from the same variable the worker does (`Settings.health_port`).
The worker listens on all addresses by default, so loopback reaches it.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

__all__ = ["LIVE_PATH", "PORT_VARIABLE", "READY_PATH", "main", "probe"]

LIVE_PATH = "/healthz"
READY_PATH = "/readyz"
PORT_VARIABLE = "CAPSTAN_HEALTH_PORT"


def probe(port: int, path: str = READY_PATH, timeout: float = 4.0) -> tuple[bool, str]:
    """(healthy, one line): healthy when `http://127.0.0.1:{port}{path}` answers 200."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return True, answer.read(300).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return False, f"{url}: {exc.code} {exc.read(300).decode(errors='replace')}"
    except OSError as exc:
        return False, f"{url}: {exc}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    port = os.environ.get(PORT_VARIABLE, "")
    if not port.isdigit():
        print(f"probe: {PORT_VARIABLE} is not set: the worker serves no health endpoint")
        return 1
    healthy, line = probe(int(port), LIVE_PATH if "--live" in args else READY_PATH)
    print(line.replace("\n", " "))
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
