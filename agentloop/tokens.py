"""Counting a prompt's tokens: a calibrated estimate by default, a local tokenizer when one is given.

The estimate starts at four characters a token and learns from the `Usage.input_tokens` a
provider reports: `learn(model, estimated, reported)` moves that model's ratio toward
reported/estimated (an exponential moving average), so a bot's counts converge on its
model's own tokenizer after a few turns. A tokenizer that runs locally (say a tiktoken
encoding already on disk) is exact for its model: `TokenizerTokens(encoding.encode)`.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from agentloop.components import PromptContext
from agentloop.messages import ChatMessage, ToolSpec

__all__ = [
    "MESSAGE_OVERHEAD",
    "TEXTS_KEPT",
    "TOOL_SPECS_KEPT",
    "EstimatedTokens",
    "LearningCounter",
    "TokenCounter",
    "TokenizerTokens",
    "message_tokens",
    "prompt_tokens",
    "request_tokens",
    "texts_tokens",
    "tool_texts",
    "tool_tokens",
]

MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role and separators), as providers count them."""


@runtime_checkable
class TokenCounter(Protocol):
    """How many tokens `text` is for `model` (None: the bot's model)."""

    def count(self, text: str, model: str | None = None) -> int: ...


@runtime_checkable
class LearningCounter(TokenCounter, Protocol):
    """A counter that corrects itself from what the provider reported for a prompt it estimated."""

    def learn(self, model: str | None, estimated: int, reported: int) -> None: ...


@attrs.define
class EstimatedTokens:
    """`chars_per_token` characters a token, scaled per model by what providers reported.

    `smoothing` is the weight of each new report in the moving ratio; a ratio stays within
    [1/4, 4] so one odd report (a cached or truncated prompt) cannot run away with it."""

    chars_per_token: float = 4.0
    smoothing: float = 0.2
    _ratios: dict[str | None, float] = attrs.field(factory=dict, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        if self.chars_per_token <= 0 or not 0 < self.smoothing <= 1:
            raise ValueError("chars_per_token must be positive and smoothing within (0, 1]")

    def ratio(self, model: str | None = None) -> float:
        """The learnt correction for `model`: 1.0 until it has reported usage."""
        return self._ratios.get(model, 1.0)

    def count(self, text: str, model: str | None = None) -> int:
        return math.ceil(len(text) * self._ratios.get(model, 1.0) / self.chars_per_token)  # `ratio`, inline: counted per message

    def count_request(self, messages: Iterable[ChatMessage], tools: Iterable[ToolSpec], model: str | None = None) -> int | None:
        """`request_tokens` of `messages` and `tools` in one pass over each (a budget checks every model call);
        None when a message carries tool calls (count those with `message_tokens`)."""
        ratio, per_token, total = self._ratios.get(model, 1.0), self.chars_per_token, 0
        for message in messages:
            if message.tool_calls:
                return None
            content = message.content
            total += MESSAGE_OVERHEAD + (math.ceil(len(content) * ratio / per_token) if content else 0)
        for text in tool_texts(tools):
            total += MESSAGE_OVERHEAD + math.ceil(len(text) * ratio / per_token)
        return total

    def learn(self, model: str | None, estimated: int, reported: int) -> None:
        """Move `model`'s ratio toward `reported / estimated` (a prompt this counter estimated)."""
        if estimated <= 0 or reported <= 0:
            return
        with self._lock:
            ratio = self.ratio(model)
            target = ratio * reported / estimated
            self._ratios[model] = min(4.0, max(0.25, ratio + self.smoothing * (target - ratio)))


TEXTS_KEPT = 4096
"""How many texts a `TokenizerTokens` remembers the count of, the most recently counted:
a session's history is counted every turn, and encoding it again each time is the cost."""


def _remembering(encode: Callable[[str], Sequence[int]]) -> Callable[[str], int]:
    return functools.lru_cache(maxsize=TEXTS_KEPT)(lambda text: len(encode(text)))


@attrs.frozen
class TokenizerTokens:
    """Exact counts from a local tokenizer's `encode` (text to token ids), whatever the model;
    the counts of the `TEXTS_KEPT` texts counted last are remembered."""

    encode: Callable[[str], Sequence[int]]
    _counts: Callable[[str], int] = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(lambda self: _remembering(self.encode), takes_self=True)
    )

    def count(self, text: str, model: str | None = None) -> int:
        return self._counts(text)


def message_tokens(counter: TokenCounter, message: ChatMessage, model: str | None = None) -> int:
    """One message's tokens: its text, its tool calls' names and arguments, and the template's overhead."""
    if not message.tool_calls:
        return MESSAGE_OVERHEAD + (counter.count(message.content, model) if message.content else 0)
    parts = [message.content or ""]
    parts += [f"{call.name} {json.dumps(call.arguments, sort_keys=True)}" for call in message.tool_calls]
    return MESSAGE_OVERHEAD + sum(counter.count(part, model) for part in parts if part)


def tool_texts(tools: Iterable[ToolSpec]) -> tuple[str, ...]:
    """Each tool spec as the text a provider is sent (name, description, JSON schema); each spec's text
    is made once (the same specs are sent call after call)."""
    return tuple(_tool_text(spec) for spec in tools)


TOOL_SPECS_KEPT = 1024
"""Tool specs whose texts `tool_texts` keeps (all are dropped when more come)."""
_TOOL_TEXTS: dict[int, tuple[ToolSpec, str]] = {}


def _tool_text(spec: ToolSpec) -> str:
    made = _TOOL_TEXTS.get(id(spec))
    if made is not None and made[0] is spec:
        return made[1]
    text = f"{spec.name} {spec.description} {json.dumps(spec.parameters, sort_keys=True)}"
    if len(_TOOL_TEXTS) >= TOOL_SPECS_KEPT:
        _TOOL_TEXTS.clear()
    _TOOL_TEXTS[id(spec)] = (spec, text)  # the spec is kept, so its id is not reused meanwhile
    return text


def texts_tokens(counter: TokenCounter, texts: Iterable[str], model: str | None = None) -> int:
    """The tokens of `texts` each sent as one item (a tool spec's text, say), overhead included."""
    return sum(MESSAGE_OVERHEAD + counter.count(text, model) for text in texts)


def tool_tokens(counter: TokenCounter, tools: Iterable[ToolSpec], model: str | None = None) -> int:
    """The tool specs' tokens as a provider is sent them (name, description, JSON schema)."""
    return texts_tokens(counter, tool_texts(tools), model)


def prompt_tokens(counter: TokenCounter, prompt: PromptContext, model: str | None = None) -> int:
    """The whole prompt the model is sent for `prompt`: system message, history, current message and tools."""
    return request_tokens(counter, prompt.to_messages(), prompt.tools, model)


def request_tokens(
    counter: TokenCounter, messages: Iterable[ChatMessage], tools: Iterable[ToolSpec] = (), model: str | None = None
) -> int:
    """The tokens of a request as sent: its messages and its tools."""
    messages = tuple(messages)
    counted = counter.count_request(messages, tools, model) if type(counter) is EstimatedTokens else None  # before each model call
    if counted is not None:
        return counted
    return sum(message_tokens(counter, m, model) for m in messages) + tool_tokens(counter, tools, model)
