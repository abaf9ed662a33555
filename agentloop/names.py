"""Names that become part of a file name (task ids, template names, bot names): one rule;
and the random ids of turns, messages and tool runs.

A safe name is 1-128 letters, digits, '.', '_' or '-', starts with a letter or digit
and holds no '..', so it can never be a path separator, a hidden file, an option-like
argument or a step up out of its directory.
"""

from __future__ import annotations

import os
import re

SAFE_NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
"""The rule in words, for error messages (with "no '..'" added where it matters)."""

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_safe_name(name: object) -> bool:
    """True if `name` is a string safe to use as part of a file name."""
    return isinstance(name, str) and _SAFE_NAME.fullmatch(name) is not None and ".." not in name


def check_bot_name(bot: object) -> None:
    """Raise ValueError unless `bot` is a safe name: it names the bot's files in its data directory."""
    if not is_safe_name(bot):
        raise ValueError(f"bot name {bot!r} must be {SAFE_NAME_RULE}, with no '..' (it names files)")


def new_id() -> str:
    """A fresh random id, 32 hex digits (128 random bits, the form of `uuid4().hex` at a fifth of its cost)."""
    return os.urandom(16).hex()
