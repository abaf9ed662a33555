"""Names that become part of a file name (task ids, template names, bot names): one rule;
the rule for the ids clients give their messages; and the random ids of turns, messages and tool runs.

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


MESSAGE_ID_RULE = "1-128 letters, digits, '.', '_', ':' or '-'"
"""The rule for a client's message id, in words."""

_MESSAGE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def is_message_id(message_id: object) -> bool:
    """True if `message_id` is a string a client may name its message by (`MESSAGE_ID_RULE`)."""
    return isinstance(message_id, str) and _MESSAGE_ID.fullmatch(message_id) is not None


def check_message_id(message_id: object) -> None:
    """Raise ValueError unless `message_id` follows `MESSAGE_ID_RULE` (ids are stored and indexed as given)."""
    if not is_message_id(message_id):
        shown = repr(message_id) if len(repr(message_id)) <= 60 else repr(message_id)[:57] + "..."
        raise ValueError(f"message id {shown} must be {MESSAGE_ID_RULE}")


def new_id() -> str:
    """A fresh random id, 32 hex digits (128 random bits, the form of `uuid4().hex` at a fifth of its cost)."""
    return os.urandom(16).hex()
