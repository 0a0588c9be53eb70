"""Every `CAPSTAN_*` variable the code reads is in the README, spelled out in full: a setting
added without a word for its users fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "capstan", ROOT / "activities", ROOT / "workflows", ROOT / "worker.py"]
VARIABLE = re.compile(r"""["'](CAPSTAN_[A-Z0-9_]+)["']""")


def _read_by_the_code() -> set[str]:
    found: set[str] = set()
    for source in SOURCES:
        files = [source] if source.is_file() else source.rglob("*.py")
        for path in files:
            found.update(VARIABLE.findall(path.read_text()))
    return found


def test_every_variable_is_documented() -> None:
    variables = _read_by_the_code()
    assert "CAPSTAN_IDLE_RELEASE" in variables and len(variables) > 30  # the scan works
    readme = (ROOT / "README.md").read_text()
    missing = sorted(v for v in variables if not re.search(rf"\b{v}\b", readme))
    assert not missing, f"not in README.md: {missing}"
