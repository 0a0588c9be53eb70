"""Text that is either inline or a reference into the content-addressed blob store.

History stays bounded because anything larger than a small threshold crosses workflow and
activity boundaries as a `BlobRef` (sha256, size, token estimate, preview), never as text.
Pure: no IO here; the store itself lives in `capstan.runtime.blobstore`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["INLINE_LIMIT_BYTES", "BlobRef", "Text", "preview_of"]

#: Content above this many UTF-8 bytes is stored as a blob and referenced.
INLINE_LIMIT_BYTES = 2048

PREVIEW_CHARS = 160


class BlobRef(BaseModel):
    """A verified pointer to content in the blob store.

    Example: ``BlobRef(sha256="ab12…", size=20480, tokens=5120, preview="first line…")``.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["ref"] = "ref"
    sha256: str
    size: int
    tokens: int = 0
    preview: str = ""


#: Inline text or a reference to it.
Text = str | BlobRef


def preview_of(text: str, limit: int = PREVIEW_CHARS) -> str:
    """A short one-line preview used in refs, status output and transcripts."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
