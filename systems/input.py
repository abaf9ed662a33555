"""Input sanitization: the user's message cleaned before anything else reads it."""

from __future__ import annotations

import re
import unicodedata
from typing import ClassVar

from agentloop import AgentContext, IncomingMessage, SanitizedInput, System
from agentloop._text import storable

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sanitize(text: str, max_chars: int) -> tuple[str, bool]:
    """NFC-normalised storable text without control characters (tabs and newlines kept),
    trimmed and cut to `max_chars`; the flag says whether it was cut."""
    cleaned = _CONTROL.sub("", unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n")))
    cleaned = storable(cleaned).strip()
    if len(cleaned) <= max_chars:
        return cleaned, False
    return cleaned[:max_chars], True


def turn_user_text(ctx: AgentContext) -> str:
    """The user's text for this turn: sanitized when InputSanitizationSystem ran, else as it
    came (made storable, so history and memory never refuse it)."""
    sanitized = ctx.get(SanitizedInput)
    return sanitized.text if sanitized is not None else storable(ctx.incoming.text)


class InputSanitizationSystem(System):
    """Writes `SanitizedInput` from the `IncomingMessage` (order 10)."""

    order: ClassVar[int] = 10
    reads = (IncomingMessage,)
    writes = (SanitizedInput,)

    def __init__(self, *, max_chars: int = 8000) -> None:
        if max_chars <= 0:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        self.max_chars = max_chars

    def process(self, ctx: AgentContext) -> None:
        text, truncated = sanitize(ctx.incoming.text, self.max_chars)
        ctx.set(SanitizedInput(text, ctx.incoming.attachments, truncated))
