"""Audit trails as JSON lines, Markdown, or one self-contained HTML page for reviewers.

JSONL is the record itself (hash-chained, written exactly as built, never reformatted). The
Markdown and HTML renderings are readings of it: a summary first, then every record in order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from capstan.audit.display import clip, count, duration, money, parse_arguments, pretty_json, utc
from capstan.audit.page import html_page
from capstan.audit.review import Review, read_trail

__all__ = ["render_trail"]

_SKIP = {"seq", "kind", "time", "run", "prev", "hash"}
_ARGUMENT_KEYS = {"arguments"}
_MD_LIMIT = 2000


def _short(key: str, value: Any) -> str:
    if key in _ARGUMENT_KEYS and isinstance(value, str):
        value = parse_arguments(value)
    elif key == "response" and isinstance(value, dict):
        calls = [
            {**c, "arguments": parse_arguments(c.get("arguments"))}
            for c in value.get("tool_calls") or []
        ]
        value = {**value, "tool_calls": calls}
    return clip(pretty_json(value), _MD_LIMIT).text


def _fenced(text: str) -> str:
    """A code block no text can close early (a tool output may hold backticks)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"\n\n{fence}\n{text}\n{fence}"


def _title(rec: dict[str, Any]) -> str:
    kind = str(rec["kind"])
    if kind == "model_call":
        return f"step {rec.get('step')}: model call ({rec.get('model') or rec.get('profile')})"
    if kind == "tool_call":
        return f"step {rec.get('step')}: {rec.get('tool')} ({rec.get('outcome', 'failed')})"
    if kind == "decision":
        return (
            f"decision: {rec.get('action')} {rec.get('request_id')} by {rec.get('identity')} "
            f"(recorded by Temporal: {rec.get('client')})"
        )
    if kind == "open_requests":
        ids = [a.get("request_id") for a in rec.get("approvals", [])]
        ids += [q.get("request_id") for q in rec.get("questions", [])]
        return f"open requests: {', '.join(str(i) for i in ids) or 'none'}"
    if kind == "run_ended":
        return f"run ended: {rec.get('terminal_reason')}"
    return kind.replace("_", " ")


def _md_summary(r: Review) -> list[str]:
    verdict = (
        f"verified: {len(r.records)} records, chain head `{r.head}`"
        if not r.problems
        else f"**{len(r.problems)} problems** (listed below)"
    )
    rows = [
        ("Outcome", r.outcome),
        ("Steps", count(r.steps)),
        ("Duration", duration(r.duration_s)),
        ("Cost", money(r.cost_usd)),
        ("Tokens in / out", f"{count(r.input_tokens)} / {count(r.output_tokens)}"),
        ("Started", f"{utc(r.started_at)} by {r.started_by} (recorded by Temporal)"),
        ("Ended", utc((r.ended or {}).get("time")) if r.ended else "still running"),
        *([("Forked from", r.forked_from)] if r.forked_from else []),
        ("Record", verdict),
    ]
    lines = [f"# Audit of run `{r.run_id}`", "", f"**Task:** {r.task}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if r.problems:
        lines += ["", "**Integrity issues:**", *[f"- {p}" for p in r.problems]]
    return lines


def _md_approvals(r: Review) -> list[str]:
    if not r.approvals:
        return ["", "No call needed approval."]
    lines = [
        "",
        "## Approvals",
        "",
        "| step | tool | decision | claimed | recorded by Temporal | when | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in r.approvals:
        d = a.decision or {}
        cells = [a.step, a.tool, d.get("action", "no decision"), d.get("identity", "")]
        cells += [d.get("client", ""), utc(d.get("time")), d.get("reason", "")]
        lines.append("| " + " | ".join(str(c or "").replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        "_claimed_: the identity the client wrote into its input; _recorded by Temporal_: the "
        "identity of the client connection that delivered it, as the server stored it.",
    ]
    return lines


def _markdown(records: list[dict[str, Any]], issues: list[str]) -> str:
    review = read_trail(records, issues)
    lines = [*_md_summary(review), *_md_approvals(review), "", "## Records", ""]
    for rec in records:
        lines += [
            f"## {rec['seq']}. {_title(rec)}",
            f"{utc(rec['time'])} · hash `{str(rec.get('hash', ''))[:16]}`",
            "",
        ]
        for key, value in rec.items():
            if key in _SKIP or value in (None, "", [], {}):
                continue
            text = _short(key, value)
            lines.append(f"- **{key}**:" + (f" {text}" if "\n" not in text else _fenced(text)))
        lines.append("")
    return "\n".join(lines)


def render_trail(records: list[dict[str, Any]], issues: list[str], fmt: str) -> str:
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, sort_keys=True, default=str) for r in records) + "\n"
    if fmt == "md":
        return _markdown(records, issues)
    if fmt == "html":
        return html_page(records, issues)
    raise ValueError(f"unknown audit format {fmt!r}: use jsonl, md or html")
