"""String contracts that two places must spell alike, pinned: a rename on one side fails here
instead of silently (a retry policy that never matches, a query nobody answers, a hint naming
a tool that does not exist)."""

from __future__ import annotations

import inspect

from capstan.activities.tools.builtins import ASK_USER_SPEC, BUILTIN_TOOLS
from capstan.core.activity_table import STORE_FAILURES
from capstan.core.tooling import ASK_USER_TOOL, READ_RESULT_TOOL
from capstan.core.workflow_io import Query
from capstan.runtime import blobstore
from capstan.workflows.agent import AgentWorkflow


def test_store_failures_name_blob_errors() -> None:
    """The activity table's non-retryable types are matched by class name (ApplicationError
    type): each must name a `BlobError` of the store."""
    for name in STORE_FAILURES:
        cls = getattr(blobstore, name, None)
        assert inspect.isclass(cls) and issubclass(cls, blobstore.BlobError), name


def test_every_query_has_its_handler() -> None:
    handlers = {
        getattr(fn, "__temporal_query_definition").name
        for _, fn in inspect.getmembers(AgentWorkflow, inspect.isfunction)
        if hasattr(fn, "__temporal_query_definition")
    }
    assert handlers == {q.value for q in Query}


def test_the_loop_tools_are_named_as_the_core_names_them() -> None:
    names = {fn.__name__ for fn in BUILTIN_TOOLS}
    assert READ_RESULT_TOOL in names
    assert ASK_USER_SPEC.name == ASK_USER_TOOL
