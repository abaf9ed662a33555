"""Free text in PostgreSQL text columns, which cannot hold a NUL character.

A text a user typed may hold one, and history must give it back as it came, so such
columns store an escaped form: U+0001 marks an escape, U+0001 U+0001 is U+0001 itself
and U+0001 "0" is NUL. Text with neither character, nearly all of it, is stored as it is.
"""

from __future__ import annotations

import re

_MARK = "\x01"
_ESCAPED = re.compile("\x01(.)", re.S)


def stored(text: str) -> str:
    """The column value for `text`."""
    if "\x00" not in text and _MARK not in text:
        return text
    return text.replace(_MARK, _MARK * 2).replace("\x00", _MARK + "0")


def loaded(value: str) -> str:
    """The text a column value of `stored` holds."""
    if _MARK not in value:
        return value
    return _ESCAPED.sub(lambda escape: "\x00" if escape[1] == "0" else escape[1], value)
