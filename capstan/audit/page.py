"""The audit as one self-contained HTML page for a reviewer.

Summary first (what the run was for, how it ended, what it cost, whether the record verifies,
who approved what), then the steps as a timeline, then the run spec folded at the end. The page
is one file: inline CSS, no scripts, nothing fetched; a Content-Security-Policy forbids scripts
and loads as a second line of defence should escaping ever miss. Long texts are clipped to a
per-page budget, so a run of thousands of steps still makes a page a browser opens quickly.
"""

from __future__ import annotations

import json
from typing import Any

from capstan.audit.display import count, duration, money, parse_time, pretty_json, utc
from capstan.audit.markup import STYLE, badge, esc, identities
from capstan.audit.review import Approval, Block, Review, read_trail
from capstan.audit.timeline import Context, outcome_tone, section

__all__ = ["html_page"]

#: the characters all clipped texts of a page share, and the bounds on one text's share
PAGE_BUDGET = 2_000_000
TEXT_MIN, TEXT_MAX = 2_000, 16_000

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_LEGEND = (
    "<b>Two identities</b> are shown for every human input. <b class=claimed>claimed</b> is the "
    "<code>identity</code> the client wrote into the input (<code>CAPSTAN_IDENTITY</code>, by "
    "default <code>user@host</code>); any client allowed to signal the run can write anything "
    "there. <b class=recorded>recorded by Temporal</b> is the identity of the client connection "
    "that delivered the signal or update, as the Temporal server stored it in the history (the "
    "SDK's <code>pid@host</code> unless the client sets one; tie it to credentials with mTLS or "
    "API keys). The recorded one says which connection acted; the claimed one says who the "
    "person said they were."
)


def _json_answer(output: Any) -> str:
    """A typed answer indented; as it is when it cannot be read (its blob is missing: the
    verification says so)."""
    try:
        return pretty_json(json.loads(str(output or "null")))
    except ValueError:
        return str(output)


def _fact(key: str, value: str) -> str:
    return f"<div class=fact><span class=k>{esc(key)}</span><span class=v>{value}</span></div>"


def _facts(r: Review) -> str:
    problems = len(r.problems)
    verdict = badge("verified", "good") if not problems else badge(f"{problems} problems", "bad")
    facts = [
        _fact("outcome", badge(r.outcome, outcome_tone(r.outcome))),
        _fact("steps", count(r.steps)),
        _fact("duration", esc(duration(r.duration_s))),
        _fact("cost", esc(money(r.cost_usd))),
        _fact("tokens in / out", f"{count(r.input_tokens)} / {count(r.output_tokens)}"),
        _fact("record", verdict),
    ]
    return f"<div class=facts>{''.join(facts)}</div>"


def _overview(r: Review) -> str:
    ended = r.ended or {}
    still = f"still running: this is as of the last record, {esc(utc(r.last_at))}"
    rows = [
        ("Run", f"<code>{esc(r.run_id)}</code>"),
        ("Started", esc(utc(r.started_at))),
        (
            "Started by",
            f"<b class=recorded>{esc(r.started_by) or '—'}</b> <span class=sub>(the client "
            "connection Temporal recorded; a start carries no claimed identity)</span>",
        ),
        (
            "Ended",
            f"{esc(utc(ended.get('time')))} · terminal reason <code>{esc(r.outcome)}</code>"
            if r.ended
            else still,
        ),
        *([("Forked from", esc(r.forked_from))] if r.forked_from else []),
        ("Model", esc(", ".join(r.models)) or "—"),
        ("Calls", f"{count(r.model_calls)} model calls · {count(r.tool_calls)} tool calls"),
        ("Temporal runs", " ".join(f"<code>{esc(t)}</code>" for t in r.temporal_runs)),
    ]
    if ended.get("output_format") == "json":
        rows.append(
            ("Answer (JSON)", f"<pre>{esc(_json_answer(ended.get('output'))[:4000])}</pre>")
        )
    elif ended.get("output"):
        rows.append(("Answer", f"<pre>{esc(str(ended['output'])[:4000])}</pre>"))
    if ended.get("error"):  # also beside an answer (`output_invalid`: the last answer, refused)
        rows.append(("Error", f"<pre>{esc(str(ended['error'])[:4000])}</pre>"))
    schema = (r.spec or {}).get("output_schema")
    if schema:
        rows.append(("Output schema", f"<pre>{esc(pretty_json(schema)[:4000])}</pre>"))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<div class=card><table class=kv>{body}</table></div>"


def _verification(r: Review) -> str:
    if not r.problems:
        return (
            "<div class='card verified'><b>The record verifies.</b> "
            f"{count(len(r.records))} records; the hash chain is intact and every blob the run "
            "references matched its sha256. Chain head <span class=hash>"
            f"{esc(r.head)}</span> (the last <code>hash</code> of "
            "<code>capstan audit RUN --format jsonl</code>; check an export with "
            "<code>capstan audit --verify-file</code>).</div>"
        )
    items = "".join(f"<li>{esc(p)}</li>" for p in r.problems)
    return (
        f"<div class='card problems'><b>The record does not verify: {len(r.problems)} "
        f"problems.</b><ul>{items}</ul></div>"
    )


def _link(rec: dict[str, Any] | None, text: str) -> str:
    return f"<a href='#r{esc(rec.get('seq'))}'>{text}</a>" if rec else text


def _decided(a: Approval) -> list[str]:
    d = a.decision
    if d is None:
        return [badge("no decision", "warn"), "", "", ""]
    tone = {"deny": "bad", "edit": "info"}.get(str(d.get("action")), "good")
    decided = _link(d, badge(str(d.get("action")), tone))
    if len(a.decisions) > 1:
        decided += f"<div class=meta>{len(a.decisions) - 1} later decision(s), not applied</div>"
    start = parse_time(a.requested.get("time")) if a.requested else None
    end = parse_time(d.get("time"))
    waited = f" ({duration((end - start).total_seconds())} later)" if start and end else ""
    who = identities(d.get("identity"), d.get("client"))
    return [decided, who, esc(utc(d.get("time"))) + waited, esc(d.get("reason"))]


def _approvals(r: Review) -> str:
    if not r.approvals:
        return "<h2>Approvals</h2><div class=card>No call needed approval.</div>"
    head = ("step", "tool · why asked", "decision", "who", "when (UTC)", "reason")
    rows = []
    for a in r.approvals:
        tool = f"<span class=tool>{esc(a.tool)}</span><div class=meta>{esc(a.why)}</div>"
        cells = [_link(a.requested, esc(a.step)), tool, *_decided(a)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    table = f"<table class=grid><tr>{header}</tr>{''.join(rows)}</table>"
    return f"<h2>Approvals</h2><div class=card>{table}</div>"


def _inputs(r: Review) -> str:
    if not r.inputs:
        return ""
    rows = []
    for i in r.inputs:
        what = _link(i, esc(str(i["kind"]).replace("_", " ")))
        said = esc(str(i.get("text") or i.get("reason") or "")[:200])
        who = identities(i.get("identity"), i.get("client"))
        cells = [what, who, esc(utc(i.get("time"))), said]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = f"<table class=grid>{''.join(rows)}</table>"
    return f"<h2>Other human input</h2><div class=card>{table}</div>"


def _block(b: Block, ctx: Context) -> str:
    title = {"start": "Start", "end": "End"}.get(b.kind, f"Step {esc(b.step)}")
    anchor = f" id=step-{esc(b.step)}" if b.kind == "step" else ""
    calls = [
        str(c.get("name"))
        for rec in b.records
        if rec["kind"] == "model_call"
        for c in (rec.get("response") or {}).get("tool_calls") or []
    ]
    said = f"{esc(', '.join(calls))} · " if calls else ""
    when = f"<small>{said}{esc(utc(b.records[0].get('time')))}</small>"
    sections = "".join(section(rec, ctx) for rec in b.records)
    return f"<div class=block{anchor}><h3>{title}{when}</h3>{sections}</div>"


def _spec(r: Review) -> str:
    spec: Any = r.spec or {}
    return (
        "<h2 id=spec>Run spec</h2><details class=card><summary>The RunSpec this run was started "
        f"with ({count(len(spec))} fields)</summary><pre>{esc(pretty_json(spec))}</pre></details>"
    )


def _head(r: Review) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>Capstan audit · {esc(r.run_id)}</title><style>{STYLE}</style></head>"
    )


def _summary(r: Review) -> str:
    return "".join(
        [
            f"<div id=summary><h1>Audit of run <code>{esc(r.run_id)}</code></h1>",
            f"<div class=task><span class=lbl>task</span> {esc(r.task)}</div>",
            _facts(r),
            _verification(r),
            _overview(r),
            _approvals(r),
            _inputs(r),
            f"<div class='card legend'>{_LEGEND}</div></div>",
        ]
    )


def html_page(records: list[dict[str, Any]], issues: list[str]) -> str:
    """The whole page: summary, timeline (one section per record), spec."""
    r = read_trail(records, issues)
    limit = max(TEXT_MIN, min(TEXT_MAX, PAGE_BUDGET // max(1, len(records))))
    approvals = {a.request_id: a for a in r.approvals}
    ctx = Context(limit=limit, start=parse_time(r.started_at), approvals=approvals)
    timeline = "".join(_block(b, ctx) for b in r.blocks)
    note = "All times UTC; +offsets from the run's start. Each record links to itself (its hash)."
    footer = (
        f"Capstan audit · {count(len(records))} records, from the Temporal history and the blob "
        f"store · texts over {count(limit)} characters are clipped on this page; the JSONL trail "
        "holds them whole."
    )
    return (
        f"{_head(r)}<body><main>{_summary(r)}<h2>Timeline</h2><div class=sub>{note}</div>"
        f"{timeline}{_spec(r)}<footer>{footer}</footer></main></body></html>\n"
    )
