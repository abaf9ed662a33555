"""`ServeSettings`: what a server runs (bot, stores, model) and the limits it enforces."""

from __future__ import annotations

import os
from typing import Any

import attrs

from agentloop.adapters.stores import DEFAULT_STORES_URL
from agentloop.adapters.urls import is_postgres_url
from agentloop.budgets import Budgets
from agentloop.mid_turn import MidTurnPolicy
from agentloop.ports import LLM
from agentloop.retention import Retention
from agentloop.serve.auth import Tokens


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _positive_whole(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"{attribute.name} must be a whole number of at least 1, got {value!r}")


PROTOCOL_NAMES = ("openai", "a2a", "agui", "mcp")
"""The standard protocols `agentloop serve` can speak beside its native API: the OpenAI API, A2A, AG-UI and MCP."""


def _known_protocols(instance: object, attribute: attrs.Attribute[Any], value: frozenset[str]) -> None:
    unknown = sorted(value - set(PROTOCOL_NAMES))
    if unknown:
        raise ValueError(f"protocols {', '.join(unknown)} are not served; the protocols are {', '.join(PROTOCOL_NAMES)}")


@attrs.frozen
class ServeSettings:
    """How `create_app` serves a bot.

    `tokens` is the token file's path (or the `Tokens` read from it). `pipeline` is `module:factory` (taking llm, channel, stores by name, as `agentloop chat`
    offers) or None for the standard bot with note-taking. `inbox` None means: through the
    workers' inbox when `stores` is a postgresql URL, in this process otherwise. `llm` is the
    model of the standard bot and of distillation at the end of a session. A session without
    a turn for `idle_timeout` seconds is ended (distilled) as `POST .../end` would. With
    `max_concurrent_turns`, at most that many turns run here at once; the others wait their turn
    (`AgentLoop`'s bound), so an overloaded server answers later rather than starving its loop.
    `mid_turn` is what a message gets while a turn of its session runs (under reject, a 409).
    `protocols` names the standard protocols served beside the native API (all of `PROTOCOL_NAMES` by default).
    """

    tokens: str | os.PathLike[str] | Tokens
    llm: LLM
    stores: str = DEFAULT_STORES_URL
    bot: str = "bot"
    pipeline: str | None = None
    inbox: bool | None = None
    max_body_bytes: int = attrs.field(default=64 * 1024, validator=_positive)
    max_message_chars: int = attrs.field(default=8000, validator=_positive)
    rate_per_minute: float = attrs.field(default=60.0, validator=_positive)
    rate_burst: int = attrs.field(default=10, validator=_positive)
    turn_timeout: float | None = attrs.field(default=120.0, validator=_positive)
    history_limit: int = attrs.field(default=200, validator=_positive)
    idle_timeout: float = attrs.field(default=1800.0, validator=_positive)
    max_concurrent_turns: int | None = attrs.field(default=None, validator=_positive_whole)
    mid_turn: MidTurnPolicy = attrs.field(default=MidTurnPolicy.QUEUE, converter=MidTurnPolicy)
    protocols: frozenset[str] = attrs.field(default=frozenset(PROTOCOL_NAMES), validator=_known_protocols)
    budgets: Budgets = Budgets()
    """The `--budget` limits, given to the bot's tool loops (turns run by workers keep the workers' own)."""
    retention: Retention | None = None
    """With a `Retention`, the server prunes the bot's stores at start and every `retention.every_minutes`."""

    @property
    def uses_inbox(self) -> bool:
        """True when turns are submitted to the workers' inbox instead of run here."""
        if self.inbox is not None:
            return self.inbox
        return is_postgres_url(self.stores)
