"""The inbox pages: sign-in, the inbox at `/`, a run's page, and the fragments and stream the
inbox script reads. Not part of the OpenAPI document (they serve people, not programs).

A page signs in with a token once (`POST /login` puts it in an HttpOnly, SameSite=Lax cookie;
see `capstan.api.auth` for why Lax); the page's own writes then go to the JSON API with the
`X-Capstan-Request` header. Signing in and out are forms: each is refused unless it comes from
this server's own pages (`same_origin`), so no other site can sign a browser in as someone
else. The pages send `Referrer-Policy: same-origin`: with `no-referrer` a browser sends
`Origin: null` on a page's own posts, which the check must refuse.
Open requests come from the runs' memos — one listing call for every run of the tenant — which
is also what the inbox stream watches to tell the page that requests opened or closed.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError

from capstan.api.auth import COOKIE, Principal, Scope, TokenStore, authenticate, same_origin
from capstan.api.backend import api_settings, tenancy
from capstan.api.errors import ApiError
from capstan.api.inbox import (
    ApprovalItem,
    Item,
    QuestionItem,
    cards,
    content_security_policy,
    inbox_page,
    login_page,
    logout_page,
    message_page,
    run_page,
)
from capstan.api.preview import bounded, write_preview
from capstan.api.stream import sse
from capstan.api.tenancy import OpenRun, Tenancy
from capstan.core import tenants
from capstan.core.steering import ApprovalRequest
from capstan.core.workflow_io import REQUESTS_MEMO, OpenRequests
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.blobstore import BlobError, ContentStore
from capstan.runtime.codec import CodecError

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
Runs = Annotated[Tenancy, Depends(tenancy)]
INBOX_POLL_SECONDS = 1.0
KEEP_ALIVE_SECONDS = 15.0


def _html(text: str, nonce: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        text,
        status_code=status,
        headers={
            "Content-Security-Policy": content_security_policy(nonce),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",  # no-referrer makes a page's own Origin null
            "Cache-Control": "no-store",
        },
    )


def _signed_in(request: Request) -> Principal | None:
    """The page's reader (cookie, or a bearer token), or None to send them to sign in."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = (
        HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.strip())
        if scheme.lower() == "bearer" and token.strip()
        else None
    )
    try:
        principal = authenticate(request, credentials)
    except ApiError:
        return None
    if not principal.may(Scope.READ):
        raise ApiError(403, "forbidden", "this token lacks the 'read' scope")
    return principal


def _approval(
    content: ContentStore, workspace: Path | None, run_id: str, r: ApprovalRequest, tenant: str
) -> ApprovalItem:
    """One approval card's data: its arguments from the content store, the write's preview
    (blocking: run through `bounded`)."""
    try:
        arguments = content.resolve(r.arguments)
    except BlobError:
        arguments = '"[the arguments cannot be read from the content store]"'
    return ApprovalItem(run_id, r, arguments, write_preview(r.tool, arguments, workspace), tenant)


async def _items(runs: Tenancy, open_runs: list[OpenRun], tenant: str) -> list[Item]:
    content = runs.client.content()
    workspace = runs.client.settings.workspace_dir
    items: list[Item] = []
    for run in open_runs:
        # a delegated child's requests are cards of its root run (`root/agent-STEP.INDEX`):
        # decided through the root, which routes them to the child that opened them
        root = run.run_id.split("/", 1)[0]
        # the run's own workspace (its tenant's, its thread's), never the root's for a tenant
        own = workspace / tenants.workspace_subdir(tenants.run_workspace_key(tenant, root))
        for r in run.requests.approvals:
            item = await bounded(partial(_approval, content, own, root, r, tenant))
            late = '"[the arguments and the preview took too long to read]"'
            items.append(item or ApprovalItem(root, r, late, None, tenant))
        items += [QuestionItem(root, q) for q in run.requests.questions]
    return items


async def _run_items(runs: Tenancy, run_id: str, principal: Principal) -> list[Item]:
    desc = await runs.owned(run_id, principal)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return []
    return await _items(runs, await _tree_requests(runs, run_id, desc), principal.tenant)


async def _tree_requests(
    runs: Tenancy, run_id: str, desc: WorkflowExecutionDescription
) -> list[OpenRun]:
    """What the run and its running delegated children announced (their memos)."""
    raw = (await desc.memo()).get(REQUESTS_MEMO)
    found = [OpenRun(run_id, "", OpenRequests.model_validate(raw) if raw else OpenRequests())]
    for child in await runs.client.children(run_id):
        below = await runs.client.describe(child.workflow_id)
        if below.status == WorkflowExecutionStatus.RUNNING:
            found += await _tree_requests(runs, child.workflow_id, below)
    return found


@router.get("/login")
async def login_form() -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    return _html(login_page(nonce), nonce)


_OTHER_SITE = (
    "This form was sent from another site (or without saying where from): sign in on this "
    "page instead."
)


@router.post("/login")
async def login(request: Request, api: Annotated[ApiSettings, Depends(api_settings)]) -> Response:
    nonce = secrets.token_urlsafe(16)
    if not same_origin(request):  # login CSRF: another site's form signing you in as someone
        return _html(login_page(nonce, _OTHER_SITE), nonce, 403)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    store: TokenStore = request.app.state.tokens
    if store.find(token) is None:
        return _html(login_page(nonce, "That token is not valid."), nonce, 401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="lax", secure=api.secure_cookies, path="/"
    )
    return response


@router.get("/logout")
async def logout_form() -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    return _html(logout_page(nonce), nonce)


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        nonce = secrets.token_urlsafe(16)
        return _html(logout_page(nonce, _OTHER_SITE.replace("sign in", "sign out")), nonce, 403)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/")
async def inbox(request: Request) -> Response:
    principal = _signed_in(request)
    if principal is None:
        return RedirectResponse("/login", status_code=303)
    runs: Tenancy = await tenancy(request)
    items = await _items(runs, await runs.open_runs(principal), principal.tenant)
    nonce = secrets.token_urlsafe(16)
    return _html(inbox_page(items, principal, nonce, datetime.now(UTC)), nonce)


@router.get("/inbox/items")
async def inbox_items(request: Request, runs: Runs, run: str | None = None) -> HTMLResponse:
    principal = _signed_in(request)
    if principal is None:
        raise ApiError(401, "unauthorized", "sign in first")
    if run is not None:
        items = await _run_items(runs, run, principal)
    else:
        items = await _items(runs, await runs.open_runs(principal), principal.tenant)
    return HTMLResponse(cards(items, datetime.now(UTC)), headers={"Cache-Control": "no-store"})


async def _inbox_stream(runs: Tenancy, principal: Principal) -> AsyncIterator[str]:
    """`inbox` with the open request keys whenever they change; a keep-alive otherwise."""
    yield "retry: 2000\n\n"
    last: list[str] | None = None
    quiet = 0.0
    while True:
        try:
            open_runs = await runs.open_runs(principal)
        except RPCError:
            yield sse({"message": "the Temporal service is not reachable"}, "error")
            return
        except CodecError as exc:  # an encrypted run and no key: say so, do not reset
            yield sse({"message": f"this server cannot decrypt a run: {exc}"}, "error")
            return
        keys = sorted(
            f"{run.run_id} {request_id}"
            for run in open_runs
            for request_id in [r.request_id for r in run.requests.approvals]
            + [q.request_id for q in run.requests.questions]
        )
        if keys != last:
            last, quiet = keys, 0.0
            yield sse({"keys": keys}, "inbox")
        elif quiet >= KEEP_ALIVE_SECONDS:
            quiet = 0.0
            yield ": keep-alive\n\n"
        await asyncio.sleep(INBOX_POLL_SECONDS)
        quiet += INBOX_POLL_SECONDS


@router.get("/inbox/events")
async def inbox_events(request: Request, runs: Runs) -> StreamingResponse:
    principal = _signed_in(request)
    if principal is None:
        raise ApiError(401, "unauthorized", "sign in first")
    return StreamingResponse(
        _inbox_stream(runs, principal),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/runs/{run_id}")
async def run_view(request: Request, run_id: str) -> Response:
    principal = _signed_in(request)
    if principal is None:
        return RedirectResponse("/login", status_code=303)
    runs: Tenancy = await tenancy(request)
    nonce = secrets.token_urlsafe(16)
    try:
        items = await _run_items(runs, run_id, principal)
    except ApiError as exc:
        if exc.status != 404:
            raise
        return _html(message_page("No such run", exc.detail.message, nonce, principal), nonce, 404)
    status = await runs.client.status(run_id)
    page = run_page(
        run_id=run_id,
        status=status,
        items=items,
        principal=principal,
        nonce=nonce,
        now=datetime.now(UTC),
    )
    return _html(page, nonce)
