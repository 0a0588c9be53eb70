"""The tenant table test (`tests/integration/test_api.py::_every_route`) covers every route that
names a run: a route added later without a row fails here, so the rule that another tenant's
run answers exactly as an unknown one reaches the next route too."""

from __future__ import annotations

from capstan.api.app import create_app
from capstan.api.auth import TokenStore
from capstan.api.settings import ApiSettings
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
