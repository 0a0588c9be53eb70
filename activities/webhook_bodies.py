"""The bodies `notify_request` posts: Capstan's JSON event, or a Slack-compatible message.

JSON (`format = "json"`)::

    {"event": "approval.opened", "delivery": "<request id>", "run_id": "...", "kind": "approval",
     "request": {ApprovalRequest or Question, arguments as text}, "inbox_path": "/runs/...#q...",
     "inbox_url": "https://inbox.example.com/runs/...#q..." or null}

Slack (`format = "slack"`): `{"text": <one line>, "blocks": [...]}` with the tool or question,
the arguments in a code block, the reason, the expiry and an "Open in the inbox" button when
`CAPSTAN_INBOX_URL` is set. Pure functions of their inputs: the caller resolves blob refs.
"""

from __future__ import annotations

from typing import Any

from capstan.core.notifications import NotifyInput

__all__ = ["event_name", "inbox_link", "json_body", "slack_body"]

#: Slack refuses a section text over 3,000 characters
_SLACK_TEXT = 2_800
#: arguments beyond this many characters are cut in a JSON body (the inbox shows them whole)
JSON_ARGUMENTS_CHARS = 16_000


def event_name(item: NotifyInput) -> str:
    return f"{item.kind}.opened"


def inbox_link(base: str | None, item: NotifyInput) -> str | None:
    return base.rstrip("/") + item.inbox_path if base else None


def json_body(item: NotifyInput, arguments: str | None, link: str | None) -> dict[str, Any]:
    """Capstan's event; `arguments` is the approval's arguments as text (resolved)."""
    request = item.approval or item.question
    assert request is not None
    fields = request.model_dump(mode="json")
    if arguments is not None:
        fields["arguments"] = arguments[:JSON_ARGUMENTS_CHARS]
        fields["arguments_truncated"] = len(arguments) > JSON_ARGUMENTS_CHARS
    return {
        "event": event_name(item),
        "delivery": item.request_id,
        "run_id": item.run_id,
        "kind": item.kind,
        "request": fields,
        "inbox_path": item.inbox_path,
        "inbox_url": link,
    }


def slack_body(item: NotifyInput, arguments: str | None, link: str | None) -> dict[str, Any]:
    """A Slack incoming-webhook message (also read by Mattermost and Rocket.Chat)."""
    run = f"run `{_esc(item.run_id)}`"
    if item.approval is not None:
        a = item.approval
        headline = f"Capstan {run} asks to approve `{_esc(a.tool)}`"
        detail = f"*Why*: {_esc(a.reason)}\n*Expires*: {a.expires_at.isoformat()}"
        code = _esc(arguments or "")
    else:
        assert item.question is not None
        q = item.question
        headline = f"Capstan {run} asks: {_esc(q.question)}"
        options = ", ".join(_esc(o) for o in q.options or [])
        detail = f"*Options*: {options}\n" if options else ""
        detail += f"*Expires*: {q.expires_at.isoformat()}"
        code = ""
    blocks: list[dict[str, Any]] = [_section(f"*{headline}*"), _section(detail)]
    if code:
        blocks.append(_section("```" + code[: _SLACK_TEXT - 6] + "```"))
    if link is not None:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open in the inbox"},
                        "url": link,
                    }
                ],
            }
        )
    text = f"{headline}: <{link}|open in the inbox>" if link else headline
    return {"text": text[:_SLACK_TEXT], "blocks": blocks}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:_SLACK_TEXT]}}


def _esc(text: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
