"""`python -m tests.record_histories` (or `make histories`): record replay fixtures.

Runs the integration tests with CAPSTAN_RECORD_HISTORIES=1, which writes the history of each
recorded scenario to tests/histories/ (existing files are kept), then derives the deliberately
broken variant that the replay tests expect to fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HISTORIES = Path(__file__).parent / "histories"


def derive_broken() -> Path:
    """parallel_tools with its first `call_model` renamed: replay must detect the mismatch."""
    history = json.loads((HISTORIES / "parallel_tools.json").read_text())
    for event in history["events"]:
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs and attrs["activityType"]["name"] == "call_model":
            attrs["activityType"]["name"] = "call_model_renamed"
            break
    target = HISTORIES / "broken" / "parallel_tools_renamed_activity.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(history, indent=2))
    return target


def main() -> int:
    env = {**os.environ, "CAPSTAN_RECORD_HISTORIES": "1"}
    code = subprocess.call([sys.executable, "-m", "pytest", "tests/integration", "-q"], env=env)
    print(f"wrote {derive_broken()}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
