"""Audit trails as JSON lines, Markdown, or one self-contained HTML page for reviewers."""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ["render_trail"]

_SKIP = {"seq", "kind", "time", "run", "prev", "hash"}


def _short(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=1, default=str)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _title(rec: dict[str, Any]) -> str:
    kind = str(rec["kind"])
    if kind == "model_call":
        return f"step {rec.get('step')}: model call ({rec.get('model') or rec.get('profile')})"
    if kind == "tool_call":
        return f"step {rec.get('step')}: {rec.get('tool')} ({rec.get('outcome', 'failed')})"
    if kind == "decision":
        return f"decision: {rec.get('action')} {rec.get('request_id')} by {rec.get('identity')}"
    if kind == "open_requests":
        ids = [a.get("request_id") for a in rec.get("approvals", [])]
        ids += [q.get("request_id") for q in rec.get("questions", [])]
        return f"open requests: {', '.join(str(i) for i in ids) or 'none'}"
    if kind == "run_ended":
        return f"run ended: {rec.get('terminal_reason')}"
    return kind.replace("_", " ")


def _markdown(records: list[dict[str, Any]], issues: list[str]) -> str:
    lines = ["# Capstan audit", ""]
    if issues:
        lines += ["**Integrity issues:**", *[f"- {i}" for i in issues], ""]
    for rec in records:
        lines += [
            f"## {rec['seq']}. {_title(rec)}",
            f"`{rec['time']}` · hash `{rec['hash'][:16]}`",
            "",
        ]
        for key, value in rec.items():
            if key in _SKIP or value in (None, "", [], {}):
                continue
            text = _short(value)
            lines += [
                f"- **{key}**:" + (f" {text}" if "\n" not in text else f"\n\n```\n{text}\n```")
            ]
        lines.append("")
    return "\n".join(lines)


_STYLE = """
body{font:14px/1.5 system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}
section{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:.8em 0}
section.model_call{border-left:4px solid #36c}section.tool_call{border-left:4px solid #393}
section.decision{border-left:4px solid #c93}section.run_ended{border-left:4px solid #933}
.issues{background:#fee;border:1px solid #c33;padding:.5em 1em}
pre{white-space:pre-wrap;background:#f7f7f7;padding:.4em;margin:.2em 0}
small{color:#777}dt{font-weight:600}
"""


def _html(records: list[dict[str, Any]], issues: list[str]) -> str:
    parts = [
        "<!doctype html><meta charset=utf-8><title>Capstan audit</title>",
        f"<style>{_STYLE}</style><h1>Capstan audit</h1>",
    ]
    if issues:
        items = "".join(f"<li>{html.escape(i)}</li>" for i in issues)
        parts.append(f"<div class=issues><b>Integrity issues</b><ul>{items}</ul></div>")
    for rec in records:
        fields = "".join(
            f"<dt>{html.escape(k)}</dt><dd><pre>{html.escape(_short(v))}</pre></dd>"
            for k, v in rec.items()
            if k not in _SKIP and v not in (None, "", [], {})
        )
        parts.append(
            f"<section class={html.escape(rec['kind'])}><h3>{rec['seq']}. "
            f"{html.escape(_title(rec))}</h3><small>{html.escape(rec['time'])} · "
            f"hash {rec['hash'][:16]}</small><dl>{fields}</dl></section>"
        )
    return "\n".join(parts)


def render_trail(records: list[dict[str, Any]], issues: list[str], fmt: str) -> str:
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, sort_keys=True, default=str) for r in records) + "\n"
    if fmt == "md":
        return _markdown(records, issues)
    if fmt == "html":
        return _html(records, issues)
    raise ValueError(f"unknown audit format {fmt!r}: use jsonl, md or html")
