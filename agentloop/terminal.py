"""Text from stores and models made safe to print on a terminal.

A note's title or a model's answer may carry escape sequences (retitle the window, clear the
screen, fake a prompt) or bidi overrides that make a line read differently from its bytes.
These are shown escaped instead: C0 and C1 controls and DEL as `\\xHH`, and the bidi controls
and line/paragraph separators as `\\uHHHH`. Newlines and tabs stay in multi-line text; a
carriage return stays only as part of a Windows line end (which becomes a newline).
"""

from __future__ import annotations

import re

_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")
_UNSAFE_IN_A_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """`text` (multi-line: Markdown, an answer) with every control character but newline and tab escaped."""
    return _UNSAFE_IN_LINES.sub(_escaped, text.replace("\r\n", "\n"))


def terminal_line(text: str) -> str:
    """`text` for one line of output (a title, an id): newlines and tabs escaped too."""
    return _UNSAFE_IN_A_LINE.sub(_escaped, text)
