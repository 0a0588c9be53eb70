"""The tenant table test (`tests/integration/test_api.py::_every_route`) covers every route that
names a run: a route added later without a row fails here, so the rule that another tenant's
run answers exactly as an unknown one reaches the next route too."""

from __future__ import annotations

from capstan.api.app import create_app
from capstan.api.auth import TokenStore
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings
from tests.integration.test_api import _every_route


def test_every_route_naming_a_run_is_in_the_tenant_table() -> None:
    app = create_app(Settings(), ApiSettings(), tokens=TokenStore({}))
    documented = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if "{run_id}" in path
        for method in operations
    }
    covered = {(method, path.replace("RUN", "{run_id}")) for method, path, _ in _every_route("RUN")}
    assert documented == covered


#: every documented route that does not name a run, by how it is kept to the caller's tenant
#: (and the test that shows it); a route added later fails below until it is placed here
TENANT_SCOPED = {
    # lists only the caller's tenant's runs:
    # test_api.py::test_another_tenant_sees_and_steers_nothing
    ("GET", "/api/runs"): "lists the caller's tenant",
    ("GET", "/api/pending"): "lists the caller's tenant",
    # starts a run owned by the caller's tenant, in its workspace: test_api_tenant_walls.py
    ("POST", "/api/runs"): "owned by the caller's tenant",
    # a thread id is the tenant's own (capstan.core.tenants.thread_workflow_id):
    # test_api_threads.py,
    # test_api_tenant_walls.py::test_thread_ids_cannot_be_squatted_or_fed_across_tenants
    ("GET", "/api/threads/{thread}"): "the caller's tenant's thread",
    ("POST", "/api/threads/{thread}/messages"): "the caller's tenant's thread",
    # AG-UI: `threadId` is the caller's tenant's thread, as in the thread routes:
    # test_agui.py::test_tokens_tenants_and_bad_input
    ("POST", "/agui"): "the caller's tenant's thread",
    ("POST", "/agui/{agent}"): "the caller's tenant's thread",
    # the caller's own token: no run, no tenant data
    ("GET", "/api/whoami"): "the caller only",
}


def test_every_other_route_is_placed_in_the_tenant_table() -> None:
    app = create_app(Settings(), ApiSettings(), tokens=TokenStore({}))
    others = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if "{run_id}" not in path
        for method in operations
    }
    assert others == set(TENANT_SCOPED)
