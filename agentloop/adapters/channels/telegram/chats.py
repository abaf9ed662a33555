"""The chat file: which Telegram chats (or users) may talk to the bot, and the user and tenant chain each stands for.

    [[chats]]
    chat = 123456789        # a private chat's id is its user's Telegram id
    user = "alice"
    org = "acme"
    project = "helpdesk"

    [[chats]]
    telegram_user = 987654  # this Telegram user, in whatever chat (a group) they write
    user = "bob"
    org = "acme"

A chat the file lists is one session, whoever writes in it; a `telegram_user` entry gives that person
a session of their own in each chat. Anything the file does not list is refused before a turn runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import attrs

from agentloop._toml import read_toml
from agentloop.context import Session
from agentloop.errors import AgentloopError

CHANNEL = "telegram"
"""`Session.channel` of every Telegram session; a session id is `telegram:CHAT` or `telegram:CHAT:USER`."""


class ChatFileError(ValueError, AgentloopError):
    """The chat file cannot be read or says something impossible; the message names the fix."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"chat file {path}: {problem}")
        self.path = path
        self.problem = problem


@attrs.frozen
class ChatOwner:
    """The user and tenant chain a chat (or a Telegram user) stands for."""

    user: str
    org: str | None = None
    team: str | None = None
    project: str | None = None


@attrs.frozen
class Chats:
    """The chats and Telegram users the bot answers, from the chat file."""

    by_chat: Mapping[int, ChatOwner]
    by_telegram_user: Mapping[int, ChatOwner] = attrs.field(factory=dict)

    def session(self, chat_id: int, telegram_user: int | None, generation: int = 0) -> Session | None:
        """The session of a message in `chat_id` from `telegram_user`; None when the file lists neither.
        `generation` counts the sessions the chat ended before this one (`/end`)."""
        owner = self.by_chat.get(chat_id)
        session_id = f"{CHANNEL}:{chat_id}"
        if owner is None and telegram_user is not None:
            owner = self.by_telegram_user.get(telegram_user)
            session_id = f"{session_id}:{telegram_user}"
        if owner is None:
            return None
        if generation:
            session_id = f"{session_id}.{generation}"
        return Session(session_id, user_id=owner.user, project_id=owner.project, team_id=owner.team, org_id=owner.org, channel=CHANNEL)


def chat_of(session: Session) -> int:
    """The Telegram chat a session of this channel talks in; `ValueError` for a session of another channel."""
    channel, _, rest = session.id.partition(":")
    try:
        if channel != CHANNEL:
            raise ValueError(channel)
        return int(rest.split(":")[0].split(".")[0])
    except ValueError:
        raise ValueError(f"session {session.id!r} is not a Telegram chat's (telegram:CHAT)") from None


def load_chats(path: str | os.PathLike[str]) -> Chats:
    """Read the chat file at `path`; `ChatFileError` says what is wrong and how to fix it."""
    shown = os.fspath(path)
    data = read_toml(path, functools.partial(ChatFileError, shown), option="--chats")
    entries = data.get("chats")
    if not isinstance(entries, list) or not entries:
        raise ChatFileError(shown, "lists no chats; add [[chats]] tables with chat (or telegram_user) and user")
    by_chat: dict[int, ChatOwner] = {}
    by_user: dict[int, ChatOwner] = {}
    for number, entry in enumerate(entries, 1):
        key, telegram_id, owner = _entry(shown, number, entry)
        listed = by_chat if key == "chat" else by_user
        if telegram_id in listed:
            raise ChatFileError(shown, f"entry #{number}: {key} {telegram_id} is listed twice; each belongs to one user")
        listed[telegram_id] = owner
    return Chats(by_chat, by_user)


def _entry(path: str, number: int, entry: Any) -> tuple[str, int, ChatOwner]:
    """Which key entry #`number` matches on (chat or telegram_user), its id, and the owner it stands for."""
    if not isinstance(entry, dict):
        raise ChatFileError(path, f"entry #{number} is not a table; write it as [[chats]] with chat and user")
    unknown = set(entry) - {"chat", "telegram_user", "user", "org", "team", "project"}
    if unknown:
        raise ChatFileError(path, f"entry #{number} has unknown keys {sorted(unknown)}; use chat, telegram_user, user, org, team, project")
    keys = [key for key in ("chat", "telegram_user") if key in entry]
    if len(keys) != 1:
        raise ChatFileError(path, f"entry #{number} needs exactly one of chat or telegram_user")
    telegram_id = entry[keys[0]]
    if not isinstance(telegram_id, int) or isinstance(telegram_id, bool):
        raise ChatFileError(path, f"entry #{number}: {keys[0]} is a number (the id Telegram gives it)")
    user = entry.get("user")
    if not isinstance(user, str) or not user:
        raise ChatFileError(path, f"entry #{number} needs a user (a non-empty string)")
    chain = {layer: entry.get(layer) for layer in ("org", "team", "project")}
    if any(value is not None and (not isinstance(value, str) or not value) for value in chain.values()):
        raise ChatFileError(path, f"entry #{number}: org, team and project are non-empty strings when given")
    return keys[0], telegram_id, ChatOwner(user, chain["org"], chain["team"], chain["project"])
