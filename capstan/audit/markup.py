"""HTML building blocks for the audit page: escaped text, collapsible outputs, tool arguments,
the two identities, and the page's one stylesheet.

Everything that reaches the page from a record goes through `esc` here: tool output, model
text, arguments and identities are untrusted (a tool can return `<script>`), and the page must
show them as text. Nothing here loads anything: no scripts, fonts, images or links out.
"""

from __future__ import annotations

import html
from typing import Any

from capstan.audit.display import clip, count, parse_arguments, pretty_json

__all__ = ["STYLE", "arguments", "badge", "esc", "identities", "recorded", "text_block"]

#: texts shorter than this (and with few lines) show open; longer ones fold into <details>
OPEN_CHARS = 600
OPEN_LINES = 12


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def badge(text: str, tone: str) -> str:
    return f'<span class="badge {esc(tone)}">{esc(text)}</span>'


def text_block(
    label: str, text: str | None, limit: int, tone: str = "", *, fold: bool = False
) -> str:
    """A labelled text: open when short, folded with a one-line preview when long (or when
    `fold`), clipped to `limit` characters either way (the page says how much it left out)."""
    if text is None or text == "":
        return ""
    c = clip(text, limit)
    body = f"<pre>{esc(c.text)}</pre>"
    cls = f"tb {esc(tone)}".strip()
    if not fold and c.total <= OPEN_CHARS and c.lines <= OPEN_LINES:
        return f'<div class="{cls}"><span class=lbl>{esc(label)}</span>{body}</div>'
    size = f"{count(c.total)} characters, {count(c.lines)} line{'s' if c.lines != 1 else ''}"
    return (
        f'<details class="{cls}"><summary><span class=lbl>{esc(label)}</span> '
        f"<span class=size>{size}</span> <span class=pv>{esc(c.first_line)}</span>"
        f"</summary>{body}</details>"
    )


def _value(value: Any, limit: int) -> str:
    text = pretty_json(value)
    c = clip(text, limit)
    if c.total <= OPEN_CHARS and c.lines <= OPEN_LINES:
        return f"<pre>{esc(c.text)}</pre>"
    return (
        f"<details><summary><span class=size>{count(c.total)} characters</span> "
        f"<span class=pv>{esc(c.first_line)}</span></summary><pre>{esc(c.text)}</pre></details>"
    )


def arguments(raw: str | None, limit: int) -> str:
    """Tool arguments as a reviewer reads them: the JSON object the model sent, one row per
    argument, strings as their own text (newlines as lines), other values indented JSON."""
    parsed = parse_arguments(raw)
    if parsed in (None, "", {}):
        return "<div class=noargs>no arguments</div>"
    if not isinstance(parsed, dict):
        return f"<div class=args>{_value(parsed, limit)}</div>"
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{_value(v, limit)}</td></tr>" for k, v in parsed.items()
    )
    return f"<table class=args>{rows}</table>"


def recorded(identity: Any) -> str:
    """The identity Temporal stored with a history event (the client connection's)."""
    return (
        "<span class=who><span class=k>recorded by Temporal</span> "
        f"<b class=recorded>{esc(identity) or '—'}</b></span>"
    )


def identities(claimed: Any, by_temporal: Any) -> str:
    """Both identities of a human input, labelled (the legend on the page explains them)."""
    return (
        f"<span class=who><span class=k>claimed</span> <b class=claimed>{esc(claimed) or '—'}"
        f"</b></span> {recorded(by_temporal)}"
    )


STYLE = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2430;
 background:#f4f5f7;margin:0}
main{max-width:1120px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px}
h3{font-size:15px;margin:0}
code,pre,.mono{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;background:#f6f7f9;
 border:1px solid #e3e6ea;border-radius:4px;padding:6px 8px;max-height:480px;overflow:auto}
.sub{color:#5b6573}.task{font-size:15px;margin:6px 0 14px}
.card{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:14px 18px;
 margin:12px 0}
.facts{display:grid;grid-template-columns:repeat(6,1fr);gap:10px;margin:12px 0}
.fact{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:10px 12px}
.fact .k{display:block;color:#5b6573;font-size:12px;text-transform:uppercase;
 letter-spacing:.04em}.fact .v{font-size:17px;font-weight:600}
table{border-collapse:collapse;width:100%}
.kv th{text-align:left;font-weight:600;color:#3b4452;width:170px;vertical-align:top;
 padding:3px 10px 3px 0}.kv td{padding:3px 0;vertical-align:top}
.grid th{text-align:left;font-size:12px;color:#5b6573;border-bottom:1px solid #dde1e6;
 padding:4px 8px}.grid td{padding:6px 8px;border-bottom:1px solid #eef0f3;vertical-align:top}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;
 font-weight:600;background:#e8eaee;color:#3b4452}
.badge.good{background:#dcf3e3;color:#14602f}.badge.bad{background:#fde2e1;color:#9b1c1c}
.badge.warn{background:#fff1d6;color:#8a5300}.badge.info{background:#e1ecfd;color:#1e4e9c}
.verified{border-left:5px solid #2e9e5a}.problems{border-left:5px solid #c53030}
.problems li{color:#9b1c1c}
.legend{font-size:13px;color:#3b4452;background:#fbfbfc}
.legend b{color:#1d2430}
.who{font-size:12.5px}.who .k{color:#6b7483}.who .claimed{color:#1e4e9c}
.who .recorded{color:#5a3d9a}
.block{margin:14px 0}.block>h3{margin:0 0 6px;color:#2a3340}
.block>h3 small{font-weight:400;color:#6b7483;margin-left:6px}
.rec{background:#fff;border:1px solid #dde1e6;border-left:4px solid #c4cad2;
 border-radius:6px;padding:8px 12px;margin:6px 0}
.rh{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap}
.rh .t{font-weight:600}.rm{margin-left:auto;color:#7a8390;font-size:12px;white-space:nowrap}
.rm a{color:#7a8390;text-decoration:none}
.rec.model_call{border-left-color:#3b6fd8}.rec.tool_call{border-left-color:#2e9e5a}
.rec.tool_call.failed{border-left-color:#c53030}
.rec.decision{border-left-color:#d69200;background:#fff9ec}
.rec.decision.deny{border-left-color:#c53030;background:#fff4f3}
.rec.open_requests{border-left-color:#d69200}
.rec.send_message,.rec.answer{border-left-color:#7b4fd0;background:#f8f5ff}
.rec.run_ended{border-left-color:#1d2430}.rec.minor{padding:4px 12px;color:#4b5563}
.thought{white-space:pre-wrap;margin:6px 0;font-size:14.5px}
.tb{margin:6px 0}.lbl{font-size:12px;font-weight:600;color:#5b6573;text-transform:uppercase;
 letter-spacing:.04em;margin-right:4px}
.tb.live{background:#f3eeff;border-radius:4px;padding:4px 8px}
.tb.nudge{background:#fff4e0;border-radius:4px;padding:4px 8px}
.tb.error pre,.integrity{background:#fff4f3;border-color:#f1b5b1;color:#8b1a1a}
details>summary{cursor:pointer;color:#2a3340}
.size{color:#6b7483;font-size:12px}.pv{color:#6b7483;font-family:ui-monospace,monospace;
 font-size:12px}
.call{margin:8px 0 4px;border-top:1px dashed #e3e6ea;padding-top:6px}
.tool{font-weight:600;font-family:ui-monospace,monospace}
.args th{text-align:left;vertical-align:top;font-weight:500;color:#3b4452;width:120px;
 padding:2px 8px 2px 0;font-family:ui-monospace,monospace;font-size:12.5px}
.args td{padding:2px 0}.noargs{color:#7a8390;font-size:12.5px}
.meta{color:#6b7483;font-size:12.5px}
.hash{font-family:ui-monospace,monospace;font-size:12px;color:#5b6573}
footer{color:#6b7483;font-size:12.5px;margin-top:30px}
"""
