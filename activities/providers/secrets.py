"""Key material never leaves a model activity: its outgoing text is scrubbed of the real keys.

A provider can echo anything back: a proxy reflects the request headers, a broken stream sends
a line of plain text, an error body quotes the key JSON-escaped (`\\u0061\\u007a…`). Matching key
*shapes* (`sk-…`) misses self-hosted and Azure keys, so `Scrubber` matches the actual values the
worker holds — every key variable any profile names (`worker_keys`) — wherever they appear raw,
JSON-escaped (`\\uXXXX`, `\\"`, `\\\\`), Python-escaped (`\\xXX`, `\\'`) or URL-encoded (`%XX`), in
any mixture and up to three escapings deep, and any run of `FRAGMENT_CHARS` or more characters
of one (a key cut in half by a truncated message).

`Scrubber.exit()` is applied where a model activity talks to its provider
(`ModelActivities.ask`), which both `call_model` and `compact_context` go through: every
exception leaves it as an `ApplicationError` with a scrubbed message and details and no
chained cause, and `Scrubber.value` cleans the heartbeat details that stream out. Keys shorter
than `MIN_SECRET_CHARS` are placeholders (`EMPTY`, `ollama`), not credentials: scrubbing them
would garble every message.

Never logs, stores or returns a key; holds the keys only for one activity call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from temporalio.exceptions import ApplicationError, FailureError

from capstan.activities.providers.errors import redact_keylike
from capstan.activities.providers.profiles import ProfileTable
from capstan.runtime.config import API_KEY_VARIABLES

__all__ = ["FRAGMENT_CHARS", "MIN_SECRET_CHARS", "REDACTED", "Scrubber", "worker_keys"]

REDACTED = "[redacted]"
#: Shorter keys are placeholders and left alone; a run of this many characters of a key is
#: redacted wherever it appears.
MIN_SECRET_CHARS = FRAGMENT_CHARS = 8
#: How many escapings deep a key is looked for (JSON inside JSON inside a URL...).
MAX_DEPTH = 3

_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\([\\\"'/])|%([0-9a-fA-F]{2})")

#: Where each character of a decoded text came from: [start, end) in the original text.
Spans = list[tuple[int, int]]


def worker_keys(env: Mapping[str, str], tables: Iterable[ProfileTable] = ()) -> tuple[str, ...]:
    """The values of every API key variable a profile may read: the providers' defaults and
    each `api_key_env` of the profiles file."""
    names = {*API_KEY_VARIABLES.values(), *(t.api_key_env for t in tables if t.api_key_env)}
    return tuple(sorted({env[n] for n in names if env.get(n)}))


def _decode(text: str, spans: Spans) -> tuple[str, Spans]:
    """One level of unescaping, and where each resulting character came from."""
    out: list[str] = []
    out_spans: Spans = []
    position = 0
    for match in _ESCAPE.finditer(text):
        for i in range(position, match.start()):
            out.append(text[i])
            out_spans.append(spans[i])
        hex_code = match.group(1) or match.group(2) or match.group(4)
        out.append(chr(int(hex_code, 16)) if hex_code else match.group(3))
        out_spans.append((spans[match.start()][0], spans[match.end() - 1][1]))
        position = match.end()
    for i in range(position, len(text)):
        out.append(text[i])
        out_spans.append(spans[i])
    return "".join(out), out_spans


@dataclass(frozen=True)
class Scrubber:
    """Redacts the given secrets from text, values and errors."""

    secrets: tuple[str, ...]
    #: every run of `FRAGMENT_CHARS` characters of every secret
    _grams: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = FRAGMENT_CHARS
        grams = {s[i : i + n] for s in self.secrets for i in range(len(s) - n + 1)}
        object.__setattr__(self, "_grams", frozenset(grams))

    def text(self, text: str) -> str:
        """`text` with every appearance of a secret (any encoding, any long fragment) redacted."""
        if not self._grams or not text:
            return text
        marked = [False] * len(text)
        view, spans = text, [(i, i + 1) for i in range(len(text))]
        for _ in range(MAX_DEPTH + 1):
            for start, end in self._matches(view):
                for a, b in spans[start:end]:
                    marked[a:b] = [True] * (b - a)
            decoded, spans = _decode(view, spans)
            if decoded == view:
                break
            view = decoded
        return _redact(text, marked)

    def _matches(self, view: str) -> Iterator[tuple[int, int]]:
        n = FRAGMENT_CHARS
        for i in range(len(view) - n + 1):
            if view[i : i + n] in self._grams:
                yield i, i + n

    def value(self, value: object) -> object:
        """`value` (heartbeat or error details) with the secrets redacted from every string."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value

    def error(self, exc: Exception) -> ApplicationError:
        """The error to raise instead of `exc`: same type and retry behaviour, scrubbed text."""
        if isinstance(exc, ApplicationError):
            return ApplicationError(
                self._message(exc.message),
                *(self.value(d) for d in exc.details),
                type=exc.type,
                non_retryable=exc.non_retryable,
                next_retry_delay=exc.next_retry_delay,
                category=exc.category,
            )
        # what Temporal would have reported for it: the class name as the type, retryable
        return ApplicationError(self._message(str(exc)), type=type(exc).__name__)

    def _message(self, text: str) -> str:
        return redact_keylike(self.text(text))

    @contextmanager
    def exit(self) -> Iterator[None]:
        """Let no exception leave the block unscrubbed, nor with its cause chained to it."""
        try:
            yield
        except FailureError as exc:
            if not isinstance(exc, ApplicationError):
                raise  # cancellation and the like: Temporal's own, no provider text
            raise self.error(exc) from None
        except Exception as exc:
            raise self.error(exc) from None


def _redact(text: str, marked: list[bool]) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if not marked[i]:
            out.append(text[i])
            i += 1
            continue
        while i < len(text) and marked[i]:
            i += 1
        out.append(REDACTED)
    return "".join(out)
