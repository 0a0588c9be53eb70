"""The inbox's HTML, rendered on the server: pages, and the request cards the script swaps in.

Pure rendering from data already read (no IO here): every value a run or a model produced is
escaped, and the pages carry a Content-Security-Policy that runs only the inline script with
this response's nonce, so text a model wrote can never act on the page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from capstan.api.auth import Principal
from capstan.api.page_assets import SCRIPT, STYLE
from capstan.api.preview import WritePreview
from capstan.audit.display import clip, duration, parse_arguments, pretty_json, utc
from capstan.core.notifications import request_anchor
from capstan.core.spec import RunStatus
from capstan.core.steering import ApprovalRequest, Question

__all__ = [
    "ApprovalItem",
    "QuestionItem",
    "cards",
    "content_security_policy",
    "inbox_page",
    "login_page",
    "logout_page",
    "message_page",
    "run_page",
]

PREVIEW_CHARS = 20_000


@dataclass(frozen=True)
class ApprovalItem:
    run_id: str
    request: ApprovalRequest
    arguments: str  # resolved from the blob store
    preview: WritePreview | None
    tenant: str


@dataclass(frozen=True)
class QuestionItem:
    run_id: str
    question: Question


Item = ApprovalItem | QuestionItem


def content_security_policy(nonce: str) -> str:
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    )


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _run_link(run_id: str) -> str:
    return f'run <a href="/runs/{_e(run_id)}">{_e(run_id)}</a>'


def _expiry(at: datetime, now: datetime) -> str:
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    left = (at - now).total_seconds()
    words = f"in {duration(left)}" if left >= 0 else f"{duration(-left)} ago"
    iso = at.isoformat()
    return f'<time datetime="{_e(iso)}">{_e(words)}</time> ({_e(utc(iso))})'


def _diff(lines: list[str]) -> str:
    out = []
    for line in lines:
        cls = (
            "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+") and not line.startswith("+++")
            else "del"
            if line.startswith("-") and not line.startswith("---")
            else ""
        )
        text = _e(line)
        out.append(f'<span class="{cls}">{text}</span>' if cls else text)
    return "\n".join(out)


def _write_preview(p: WritePreview, dom: str) -> str:
    content = clip(p.content, PREVIEW_CHARS).text
    diff = (
        f'<pre aria-labelledby="{dom}-d">{_diff(p.diff)}</pre>'
        if p.diff
        else f'<p class="meta">{_e(p.note or "no change")}</p>'
    )
    note = f" — {_e(p.note)}" if p.note and p.diff else ""
    return (
        f'<div class="cols"><div><h3 id="{dom}-c">Content of {_e(p.path)}</h3>'
        f'<pre aria-labelledby="{dom}-c">{_e(content)}</pre></div>'
        f'<div><h3 id="{dom}-d">Change to the file now{note}</h3>{diff}</div></div>'
    )


def _approval(item: ApprovalItem, now: datetime) -> str:
    r = item.request
    key = f"{item.run_id} {r.request_id}"
    dom = request_anchor(item.run_id, r.request_id)
    pretty = pretty_json(parse_arguments(item.arguments))
    title = f"{r.tool} in {item.run_id}, step {r.step}"
    preview = _write_preview(item.preview, dom) if item.preview else ""
    return f"""<article class="card" id="{dom}" data-key="{_e(key)}" data-run="{_e(item.run_id)}"
 data-request="{_e(r.request_id)}" data-hash="{_e(r.args_hash)}" data-title="{_e(title)}"
 aria-labelledby="{dom}-t">
<h2 id="{dom}-t">Approve <code>{_e(r.tool)}</code>?
 <span class="meta">{_run_link(item.run_id)}, step {r.step}</span></h2>
<p class="meta"><strong>Why asked:</strong> {_e(r.reason)}</p>
<p class="meta"><strong>Asked of:</strong> reviewers of tenant {_e(item.tenant)} (approve scope)</p>
<p class="meta"><strong>Expires:</strong> {_expiry(r.expires_at, now)}</p>
<h3 id="{dom}-a">Arguments</h3>
<pre aria-labelledby="{dom}-a">{_e(clip(pretty, PREVIEW_CHARS).text)}</pre>
{preview}
<label for="{dom}-e">Arguments to run with (JSON; edit, then “Approve with edits”)</label>
<textarea id="{dom}-e" name="arguments" rows="6" spellcheck="false">{_e(pretty)}</textarea>
<label for="{dom}-r">Reason (required to deny; the model reads it)</label>
<input type="text" id="{dom}-r" name="reason" autocomplete="off">
<div class="buttons">
<button type="button" class="primary" data-do="approve">Approve</button>
<button type="button" data-do="edit">Approve with edits</button>
<button type="button" data-do="always">Always allow {_e(r.tool)} in this run</button>
<button type="button" class="danger" data-do="deny">Deny</button>
</div>
<p class="result" role="status" aria-live="polite"></p>
</article>"""


def _question(item: QuestionItem, now: datetime) -> str:
    q = item.question
    key = f"{item.run_id} {q.request_id}"
    dom = request_anchor(item.run_id, q.request_id)
    title = f"Question in {item.run_id}, step {q.step}"
    options = "".join(f'<option value="{_e(o)}"></option>' for o in q.options or [])
    hint = f" (suggested: {_e(', '.join(q.options))})" if q.options else ""
    return f"""<article class="card" id="{dom}" data-key="{_e(key)}" data-run="{_e(item.run_id)}"
 data-request="{_e(q.request_id)}" data-title="{_e(title)}" aria-labelledby="{dom}-t">
<h2 id="{dom}-t">The agent asks
 <span class="meta">{_run_link(item.run_id)}, step {q.step}</span></h2>
<p>{_e(q.question)}</p>
<p class="meta"><strong>Expires:</strong> {_expiry(q.expires_at, now)}</p>
<label for="{dom}-x">Your answer{hint}</label>
<input type="text" id="{dom}-x" name="answer" list="{dom}-o" autocomplete="off">
<datalist id="{dom}-o">{options}</datalist>
<div class="buttons"><button type="button" class="primary" data-do="answer">Answer</button></div>
<p class="result" role="status" aria-live="polite"></p>
</article>"""


def cards(items: Iterable[Item], now: datetime) -> str:
    """The request cards (the fragment the script reconciles by `data-key`)."""
    return "\n".join(
        _approval(i, now) if isinstance(i, ApprovalItem) else _question(i, now) for i in items
    )


def _page(title: str, body: str, nonce: str, principal: Principal | None, attrs: str = "") -> str:
    who = (
        f'<form class="who" method="post" action="/logout">{_e(principal.identity)} · tenant '
        f'{_e(principal.tenant)} · <button type="submit" class="link">sign out</button></form>'
        if principal
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style nonce="{nonce}">{STYLE}</style></head>
<body{attrs}>
<header class="top"><h1><a href="/">Capstan inbox</a></h1>{who}</header>
<p id="announce" class="sr-only" role="status" aria-live="polite"></p>
<main>{body}</main>
<script nonce="{nonce}">{SCRIPT}</script>
</body></html>"""


def inbox_page(items: list[Item], principal: Principal, nonce: str, now: datetime) -> str:
    body = f"""<h2>Waiting for you</h2>
<p id="empty" class="empty"{" hidden" if items else ""}>Nothing is waiting: no run asks for
an approval or an answer.</p>
<section id="requests" data-source="/inbox/items" aria-label="Open requests">
{cards(items, now)}
</section>"""
    return _page("Capstan inbox", body, nonce, principal, ' data-inbox="/inbox/events"')


def _status_lines(status: RunStatus) -> str:
    reason = status.terminal_reason.value if status.terminal_reason else "—"
    waiting = ", ".join(status.waiting_for) or "nothing"
    return (
        f'<p class="status-line">Phase <strong>{_e(status.phase)}</strong>, step {status.step}, '
        f"terminal reason <strong>{_e(reason)}</strong>; waiting for {_e(waiting)}.</p>"
    )


def run_page(
    *,
    run_id: str,
    status: RunStatus,
    items: list[Item],
    principal: Principal,
    nonce: str,
    now: datetime,
) -> str:
    rid = _e(run_id)
    body = f"""<h2>Run {rid}</h2>
{_status_lines(status)}
<p id="ending" role="status" aria-live="polite"></p>
<section class="card" data-run="{rid}" data-controls="1" aria-labelledby="controls-t">
<h2 id="controls-t">Steer</h2>
<label for="run-message">Message for the model (read at its next step)</label>
<textarea id="run-message" name="message" rows="2"></textarea>
<label for="run-reason">Reason (for pause or cancel)</label>
<input type="text" id="run-reason" name="reason" autocomplete="off">
<div class="buttons">
<button type="button" class="primary" data-do="send">Send message</button>
<button type="button" data-do="pause">Pause</button>
<button type="button" data-do="resume">Resume</button>
<button type="button" class="danger" data-do="cancel">Cancel run</button>
</div>
<p class="result" role="status" aria-live="polite"></p>
</section>
<h2>Waiting for you</h2>
<section id="requests" data-source="/inbox/items?run={rid}" aria-label="Open requests">
{cards(items, now)}
</section>
<h2>Streaming reply</h2>
<pre id="live-text" aria-label="The model's reply as it streams"></pre>
<h2>Events</h2>
<ol id="events" class="events" data-source="/api/runs/{rid}/events" aria-live="polite"></ol>"""
    return _page(f"Run {run_id} · Capstan", body, nonce, principal)


def login_page(nonce: str, error: str = "") -> str:
    problem = f'<p class="result error" role="alert">{_e(error)}</p>' if error else ""
    body = f"""<h2>Sign in</h2>{problem}
<form method="post" action="/login" class="card">
<label for="token">API token</label>
<input type="password" id="token" name="token" autocomplete="current-password" required>
<div class="buttons"><button type="submit" class="primary">Sign in</button></div>
</form>"""
    return _page("Sign in · Capstan", body, nonce, None)


def logout_page(nonce: str, error: str = "") -> str:
    """Signing out is a form too (a link would let any site sign a browser out)."""
    problem = f'<p class="result error" role="alert">{_e(error)}</p>' if error else ""
    body = f"""<h2>Sign out</h2>{problem}
<form method="post" action="/logout" class="card">
<div class="buttons"><button type="submit" class="primary">Sign out</button></div>
</form>"""
    return _page("Sign out · Capstan", body, nonce, None)


def message_page(title: str, text: str, nonce: str, principal: Principal | None) -> str:
    return _page(title, f"<h2>{_e(title)}</h2><p>{_e(text)}</p>", nonce, principal)
