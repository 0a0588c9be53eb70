"""The workflow code holds no state between runs: the worker runs it outside Temporal's sandbox
(`capstan.worker.workflow_runner`), where every run shares the same modules, so a module-level
container written by one run would be read by the next. Only read-only lookup tables built at
import are allowed; a new mutable global in `capstan.core` or `capstan.workflows` fails here."""

from __future__ import annotations

import importlib
import pkgutil
import types

import capstan.core
import capstan.workflows

#: built once at import from constants, never written afterwards
LOOKUP_TABLES = {
    "capstan.core.activity_table.ACTIVITIES",
    "capstan.core.steering._BY_SIGNAL",
    "capstan.core.steering._TEXT_FIELDS",
    "capstan.core.transitions._MOVES",
}
MUTABLE = (list, dict, set, bytearray)


def _module_globals() -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for package in (capstan.core, capstan.workflows):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, types.ModuleType) or name.startswith("__"):
                    continue
                if isinstance(value, MUTABLE):
                    found.append((f"{_home(module, name)}.{name}", value))
    return found


def _home(module: types.ModuleType, name: str) -> str:
    """Where a global is defined (a module re-exporting another's table names the original)."""
    for table in LOOKUP_TABLES:
        home, _, table_name = table.rpartition(".")
        if table_name == name and getattr(importlib.import_module(home), name, None) is getattr(
            module, name
        ):
            return home
    return module.__name__


def test_workflow_modules_hold_no_mutable_state() -> None:
    names = {name for name, _ in _module_globals()}
    assert names - LOOKUP_TABLES == set(), "mutable module state in workflow code"


def test_the_check_sees_a_mutable_global() -> None:
    from capstan.core import limits

    limits.SEEN_RUNS = []  # type: ignore[attr-defined]
    try:
        assert "capstan.core.limits.SEEN_RUNS" in {name for name, _ in _module_globals()}
    finally:
        del limits.SEEN_RUNS  # type: ignore[attr-defined]
