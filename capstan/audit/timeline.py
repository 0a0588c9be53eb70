"""The audit page's timeline: one `<section>` per trail record, written for a reviewer.

Every record of the trail becomes exactly one section, in trail order, carrying its sequence
number and hash (so a reviewer can cite "record 12" and match it against the JSONL export). A
model call shows the thought and the calls it asked for with readable arguments; a tool call
shows its outcome and its observation (folded when long); decisions and human input stand out
and name both identities. Untrusted text is only ever written through `markup.esc`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from capstan.audit.display import count, duration, money, parse_time, pretty_json, utc, utc_clock
from capstan.audit.markup import arguments, badge, esc, identities, recorded, text_block
from capstan.audit.review import INPUT_KINDS, Approval

__all__ = ["Context", "outcome_tone", "section"]

Record = dict[str, Any]
Renderer = Callable[[Record, "Context"], str]

_SKIP = frozenset({"seq", "kind", "time", "run", "prev", "hash", "integrity"})
_NOT_DETAILS = _SKIP | {"via", "identity", "client", "id", "text"}
_ACTIONS = {
    "approve": ("approved", "good"),
    "always": ("approved (and every later call of this tool)", "good"),
    "edit": ("approved with edited arguments", "info"),
    "deny": ("denied", "bad"),
}
_INPUT_TITLES = {
    "send_message": "Live message",
    "pause": "Pause requested",
    "resume": "Resume requested",
    "cancel": "Cancel requested",
    "answer": "Question answered",
    "grant_steps": "More steps granted",
    "grant_budget": "Budget raised",
}
_NO_ARGS = "\0"  # a call the model never asked for (so any arguments are worth showing)


@dataclass
class Context:
    """What a section needs beyond its own record."""

    limit: int
    start: datetime | None
    approvals: dict[str, Approval] = field(default_factory=dict)
    asked: dict[str, str | None] = field(default_factory=dict)  # call id -> model's arguments


def outcome_tone(reason: str) -> str:
    return {"completed": "good", "running": "info", "cancelled": "warn"}.get(reason, "bad")


def _title(text: str, extra: str = "") -> str:
    return f"<span class=t>{esc(text)}</span>{' ' + extra if extra else ''}"


def _meta(parts: list[str]) -> str:
    return f"<div class=meta>{' · '.join(parts)}</div>"


def _when(rec: Record, ctx: Context) -> str:
    at, iso = parse_time(rec.get("time")), rec.get("time")
    offset = f" · +{duration((at - ctx.start).total_seconds())}" if at and ctx.start else ""
    return f'<span title="{esc(utc(iso))}">{esc(utc_clock(iso))}</span>{offset}'


def _frame(rec: Record, ctx: Context, title: str, body: str, cls: str = "") -> str:
    seq, digest = esc(rec.get("seq")), esc(rec.get("hash", ""))
    problems = rec.get("integrity") or []
    if problems:
        items = "".join(f"<li>{esc(p)}</li>" for p in problems)
        body += f"<div class=integrity><b>Integrity</b><ul>{items}</ul></div>"
    link = f'<a href="#r{seq}" title="sha256 {digest}">record {seq}</a>'
    return (
        f'<section class="rec {esc(rec["kind"])} {cls}" id="r{seq}"><div class=rh>{title}'
        f"<span class=rm>{_when(rec, ctx)} · {link}</span></div>{body}</section>"
    )


def _error(rec: Record, ctx: Context) -> str:
    return text_block("error", rec.get("error"), ctx.limit, "error") if rec.get("error") else ""


def _seconds(ms: Any) -> str:
    return duration((ms or 0) / 1000)


def _model_meta(rec: Record) -> str:
    usage, response = rec.get("usage") or {}, rec.get("response") or {}
    parts = [
        esc(rec.get("model") or rec.get("profile") or "model"),
        f"{count(usage.get('input_tokens'))} tokens in · {count(usage.get('output_tokens'))} out",
        f"answered in {_seconds(rec.get('elapsed_ms'))}",
    ]
    if usage.get("cost_usd"):
        parts.append(money(usage.get("cost_usd")))
    if (rec.get("attempts") or 1) > 1:
        parts.append(f"attempt {esc(rec['attempts'])}")
    if response.get("stop_reason") not in (None, "tool_calls", "stop", "end_turn"):
        parts.append(f"stopped: {esc(response.get('stop_reason'))}")
    return _meta(parts)


def _model_call(rec: Record, ctx: Context) -> str:
    response = rec.get("response") or {}
    body = [_model_meta(rec)]
    body += [_delivered(m, rec, ctx) for m in (rec.get("request") or {}).get("new_messages") or []]
    if response.get("text"):
        body.append("<div class=tb><span class=lbl>thought</span></div>")
        body.append(f"<div class=thought>{esc(response['text'])}</div>")
    body.append(text_block("reasoning", response.get("reasoning"), ctx.limit))
    for c in response.get("tool_calls") or []:
        ctx.asked[str(c.get("id"))] = c.get("arguments")
        body.append(
            f"<div class=call><span class=lbl>calls</span> <span class=tool>{esc(c.get('name'))}"
            f"</span> <code class=sub>{esc(c.get('id'))}</code>"
            f"{arguments(c.get('arguments'), ctx.limit)}</div>"
        )
    body.append(_error(rec, ctx))
    return _frame(rec, ctx, _title("Model"), "".join(body))


def _delivered(message: Record, rec: Record, ctx: Context) -> str:
    """The inputs a model call carried that a reviewer should see (tool results show at
    their own call; the task is in the summary)."""
    origin, content = message.get("origin"), message.get("content")
    if origin == "live":
        return text_block("live message delivered", content, ctx.limit, "live")
    if origin == "nudge":
        return text_block("nudge from Capstan", content, ctx.limit, "nudge")
    if origin == "system" and rec.get("step") == 1:
        return text_block("system prompt", content, ctx.limit, fold=True)
    return ""


def _tool_call(rec: Record, ctx: Context) -> str:
    ok = rec.get("outcome") == "succeeded"
    tool = f"<span class=tool>{esc(rec.get('tool'))}</span>"
    outcome = badge(str(rec.get("outcome") or "failed"), "good" if ok else "bad")
    title = _title("Tool", f"{tool} {outcome} <code class=sub>{esc(rec.get('call_id'))}</code>")
    parts = [f"ran in {_seconds(rec.get('duration_ms'))}"]
    if (rec.get("attempts") or 1) > 1:
        parts.append(f"attempt {esc(rec['attempts'])}")
    if rec.get("worker"):
        parts.append(f"worker {esc(rec['worker'])}")
    body = [_meta(parts)]
    asked = ctx.asked.get(str(rec.get("call_id")), _NO_ARGS)
    if asked != rec.get("arguments"):
        label = "arguments" if asked == _NO_ARGS else "ran with edited arguments"
        shown = arguments(rec.get("arguments"), ctx.limit)
        body.append(f"<div class=call><span class=lbl>{label}</span>{shown}</div>")
    label, tone = ("observation", "") if ok else ("error", "error")
    body += [text_block(label, rec.get("result"), ctx.limit, tone), _error(rec, ctx)]
    return _frame(rec, ctx, title, "".join(body), "" if ok else "failed")


def _asked(rec: Record, approval: Record) -> str:
    expires, at = parse_time(approval.get("expires_at")), parse_time(rec.get("time"))
    left = f" (in {duration((expires - at).total_seconds())})" if expires and at else ""
    meta = _meta(
        [
            f"request <code>{esc(approval.get('request_id'))}</code>",
            f"arguments hash <span class=hash>{esc(approval.get('args_hash'))}</span>",
            f"expires {esc(utc(approval.get('expires_at')))}{left}",
        ]
    )
    return (
        f"<div class=call><span class=lbl>approval requested</span> "
        f"<span class=tool>{esc(approval.get('tool'))}</span> <code class=sub>"
        f"{esc(approval.get('call_id'))}</code> — {esc(approval.get('reason'))}{meta}</div>"
    )


def _open_requests(rec: Record, ctx: Context) -> str:
    rows = [_asked(rec, a) for a in rec.get("approvals") or []]
    for q in rec.get("questions") or []:
        label = f"question {q.get('request_id', '')}"
        rows.append(text_block(label, q.get("question") or pretty_json(q), ctx.limit))
    if not rows:
        return _frame(rec, ctx, _title("Nothing waits for people now"), "", "minor")
    return _frame(rec, ctx, _title("Waiting for people"), "".join(rows))


def _sender(rec: Record) -> str:
    who = identities(rec.get("identity"), rec.get("client"))
    return f"<div>{who} <span class=k>via</span> {esc(rec.get('via'))}</div>"


def _binding(rec: Record, asked: Approval | None) -> str:
    parts = [f"request <code>{esc(rec.get('request_id'))}</code>"]
    if asked and asked.requested:
        start, end = parse_time(asked.requested.get("time")), parse_time(rec.get("time"))
        if start and end:
            parts.append(f"decided {duration((end - start).total_seconds())} after the request")
        if asked.args_hash == rec.get("args_hash"):
            parts.append("bound to the arguments shown")
        else:
            parts.append("<b>the arguments hash differs from the request's</b>")
    parts.append(f"arguments hash <span class=hash>{esc(rec.get('args_hash'))}</span>")
    return _meta(parts)


def _decision(rec: Record, ctx: Context) -> str:
    action = str(rec.get("action"))
    said, tone = _ACTIONS.get(action, (action, "info"))
    asked = ctx.approvals.get(str(rec.get("request_id")))
    tool = f"<span class=tool>{esc(asked.tool)}</span> " if asked and asked.tool else ""
    body = [_sender(rec)]
    if rec.get("reason"):
        body.append(f"<div class=thought>“{esc(rec['reason'])}”</div>")
    body.append(_binding(rec, asked))
    if rec.get("arguments"):
        edited = arguments(rec["arguments"], ctx.limit)
        body.append(f"<div class=call><span class=lbl>edited arguments</span>{edited}</div>")
    title = _title("Decision", tool + badge(said, tone))
    return _frame(rec, ctx, title, "".join(body), "deny" if action == "deny" else "")


def _human(rec: Record, ctx: Context) -> str:
    kind = str(rec["kind"])
    label = "message" if kind == "send_message" else "text"
    body = _sender(rec) + text_block(label, rec.get("text"), ctx.limit, "live")
    fields = {k: v for k, v in rec.items() if k not in _NOT_DETAILS and v not in (None, "")}
    if fields:
        body += _meta([f"{esc(k)}: {esc(v)}" for k, v in fields.items()])
    return _frame(rec, ctx, _title(_INPUT_TITLES.get(kind, kind)), body)


def _run_started(rec: Record, ctx: Context) -> str:
    if rec.get("continued"):
        run = f"<code class=sub>{esc(rec.get('run'))}</code>"
        return _frame(rec, ctx, _title("Continued as new", run), "", "minor")
    spec = '<div class=meta>the run spec is at the <a href="#spec">end of the page</a></div>'
    return _frame(rec, ctx, _title("Run started", recorded(rec.get("client"))), spec)


def _run_ended(rec: Record, ctx: Context) -> str:
    reason = str(rec.get("terminal_reason") or "ended")
    steps = f"<span class=meta>after {count(rec.get('steps'))} steps</span>"
    title = _title("Run ended", f"{badge(reason, outcome_tone(reason))} {steps}")
    body = text_block("answer", rec.get("output"), ctx.limit) + _error(rec, ctx)
    return _frame(rec, ctx, title, body)


def _minor(text: Callable[[Record], str]) -> Renderer:
    def render(rec: Record, ctx: Context) -> str:
        return _frame(rec, ctx, f"<span>{text(rec)}</span>", _error(rec, ctx), "minor")

    return render


def _models(rec: Record) -> str:
    parts = [
        f"{esc(m.get('model'))} ({esc(m.get('provider'))}, "
        f"{count(m.get('context_window'))}-token window)"
        for m in rec.get("models") or []
    ]
    return "Model: " + (", ".join(parts) or "—")


def _generic(rec: Record, ctx: Context) -> str:
    fields = {k: v for k, v in rec.items() if k not in _SKIP}
    body = text_block("details", pretty_json(fields), ctx.limit)
    return _frame(rec, ctx, _title(str(rec["kind"]).replace("_", " ")), body)


_RENDERERS: dict[str, Renderer] = {
    "model_call": _model_call,
    "tool_call": _tool_call,
    "open_requests": _open_requests,
    "decision": _decision,
    "run_started": _run_started,
    "run_ended": _run_ended,
    "tools_loaded": _minor(lambda r: "Tools offered: " + esc(", ".join(r.get("tools") or []))),
    "model_described": _minor(_models),
    "wait": _minor(lambda r: f"Waiting durably, at most {duration(r.get('seconds'))}"),
    "continued_as_new": _minor(
        lambda r: f"History continued as new → <code>{esc(r.get('new_run_id'))}</code>"
    ),
    "cancel_requested": _minor(
        lambda r: "Temporal cancellation requested " + recorded(r.get("client"))
    ),
}


def section(rec: Record, ctx: Context) -> str:
    """One record as one `<section>`."""
    kind = str(rec["kind"])
    renderer = _human if kind in INPUT_KINDS else _RENDERERS.get(kind, _generic)
    return renderer(rec, ctx)
