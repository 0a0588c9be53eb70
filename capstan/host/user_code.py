"""The user's code a worker imports by dotted path: its tools module (`CAPSTAN_TOOLS`) and its
finish guard (`CAPSTAN_FINISH_GUARD`). A module that cannot be imported, or that raises while
importing, is one `ConfigError` line naming the variable and the module."""

from __future__ import annotations

import importlib

from capstan.activities.tool_runner import FinishGuard
from capstan.activities.tools.builtins import LOOP_TOOL_SPECS, builtin_tools
from capstan.activities.tools.jail import Jail
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.errors import ConfigError

__all__ = ["build_registry", "import_user_module", "load_finish_guard"]


def build_registry(tools_module: str | None, jail: Jail | None = None) -> ToolRegistry:
    """Builtins (with the sandbox tools when there is a `jail`) plus the user's tools from
    `CAPSTAN_TOOLS=pkg.module` (its `tools` list)."""
    registry = ToolRegistry(builtin_tools(jail))
    for spec in LOOP_TOOL_SPECS:
        registry.add_spec(spec)
    if tools_module:
        registry.add_module(import_user_module(tools_module, "CAPSTAN_TOOLS"), tools_module)
    return registry


def load_finish_guard(spec: str | None) -> FinishGuard | None:
    """`CAPSTAN_FINISH_GUARD=pkg.module:function`, an async function
    `(answer, run_id, step) -> reason | None` that may refuse a run's first finish."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    guard: FinishGuard | None = getattr(
        import_user_module(module_name, "CAPSTAN_FINISH_GUARD"), attr or "finish_guard", None
    )
    if not callable(guard):
        raise ConfigError(f"CAPSTAN_FINISH_GUARD={spec}: {module_name} has no function {attr!r}")
    return guard


def import_user_module(module_name: str, variable: str) -> object:
    """The module `variable` names, imported; a failure is one line naming both."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{variable}={module_name}: cannot import it: {exc}") from exc
    except Exception as exc:  # the module itself raised: it is the user's code, say what
        said = (str(exc).splitlines() or [""])[0]
        problem = f"{type(exc).__name__}: {said}"
        raise ConfigError(f"{variable}={module_name}: importing it raised {problem}") from exc
