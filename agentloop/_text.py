"""Text made safe to store and to show: applied where text enters the framework (user
input, model output, tool output, template inputs), so no store refuses it later."""

from __future__ import annotations

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """`text` with every lone surrogate and every NUL replaced by U+FFFD.

    Lone surrogates (an `os.listdir` name that is not UTF-8) cannot be encoded, and NUL
    cuts text short in C libraries; the replacement keeps a visible mark where they were.
    """
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def cap_bytes(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes plus a marker saying how much was cut."""
    if len(text) * 4 <= limit:
        return text
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return text
    kept = text[:limit].encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")
    return f"{kept}\n…[cut: {size:,} bytes, {_size(limit)} kept]"


def _size(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n:,} bytes"
