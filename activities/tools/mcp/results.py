"""An MCP tool result as the text the model reads; binary content goes to the blob store.

Text blocks are kept as they are. Images, audio and binary resources are decoded and stored as
blobs (content-addressed, hash-verified like everything else), and the text names each by its
sha256 and size, so history and the conversation carry a ref, never base64. Embedded text
resources are shown with their URI; resource links are named, not followed. A result with no
content but structured content shows the structured content as JSON. Budgeting and fencing are
not done here: the text is a tool output like any other.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

__all__ = ["StoreBytes", "result_text"]

#: Writes bytes to the blob store and returns their sha256.
StoreBytes = Callable[[bytes], str]


def result_text(result: CallToolResult, store: StoreBytes) -> str:
    """The whole result as one text, binary parts stored through `store` and named by ref."""
    parts = [_block_text(block, store) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts) if parts else "(the tool returned no content)"


def _block_text(block: ContentBlock, store: StoreBytes) -> str:
    match block:
        case TextContent(text=text):
            return text
        case ImageContent(data=data, mime_type=mime) | AudioContent(data=data, mime_type=mime):
            return _stored(block.type, mime, data, store)
        case EmbeddedResource(resource=TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case EmbeddedResource(resource=BlobResourceContents(uri=uri, blob=blob, mime_type=mime)):
            return _stored(f"resource {uri}", mime or "application/octet-stream", blob, store)
        case ResourceLink(uri=uri, name=name, mime_type=mime):
            kind = f", {mime}" if mime else ""
            return f"[resource link {uri} ({name}{kind}); not read]"
    return f"[{getattr(block, 'type', 'unknown')} content not shown]"


def _stored(what: str, mime: str, data: str, store: StoreBytes) -> str:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[{what} {mime}: the server sent data that is not base64; not stored]"
    digest = store(raw)
    return f"[{what} {mime}, {len(raw)} bytes, stored as blob sha256:{digest}]"
