"""The vocabulary of the LLM port: chat messages, tool calls, requests and replies."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from agentloop.outcome import FailureKind


class Role(enum.Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class ToolCall:
    """A model's request to run tool `name` with JSON `arguments`.

    `arguments_error` says why the model's arguments could not be read (then `arguments`
    is empty); the tool loop tells the model so instead of running the tool.
    `arguments_text` keeps such arguments as the model sent them, so the call is shown
    back to the model as it made it.
    """

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict, hash=False)
    arguments_error: str | None = None
    arguments_text: str | None = None


@attrs.frozen
class ChatMessage:
    """One message of a conversation, as stored in history and sent to a model."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(Role.SYSTEM, content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        return cls(Role.USER, content)

    @classmethod
    def assistant(cls, content: str | None, tool_calls: tuple[ToolCall, ...] = ()) -> ChatMessage:
        return cls(Role.ASSISTANT, content, tool_calls)

    @classmethod
    def tool(cls, call_id: str, name: str, content: str) -> ChatMessage:
        return cls(Role.TOOL, content, tool_call_id=call_id, name=name)


@attrs.frozen
class ToolSpec:
    """A tool as a model sees it: a name, a description and a JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen
class ResponseSchema:
    """The JSON schema the model's final answer must fit. A provider that can constrain its text sends
    it as `response_format`; one that cannot offers a tool named `name` and the answer is that call's arguments."""

    name: str
    schema: dict[str, Any] = attrs.field(hash=False)
    description: str = ""


@attrs.frozen
class LlmRequest:
    """What a model is asked: the conversation, the tools it may call, and sampling settings
    passed through to the provider as given (None: the provider's default).

    `time_left` is how many seconds the caller will wait for the whole answer, retries
    included (the tool loop passes the turn's); an adapter starts no attempt or retry
    wait that would end after it. None: no limit but the adapter's own timeouts.

    `cache_key` names the conversation the request continues (the tool loop derives it from
    the session), for a provider that routes a prompt to its cache by such a key; it says
    nothing about the prompt itself, so an adapter that has no use for it ignores it.
    """

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    time_left: float | None = None
    response_schema: ResponseSchema | None = None
    cache_key: str | None = None


@attrs.frozen
class Usage:
    """Tokens a model call read and wrote, as the provider counted them.

    `input_tokens` counts the whole prompt, cached parts included; of those,
    `cache_read_tokens` were read from the provider's prompt cache and
    `cache_write_tokens` were written to it. Usages add up with `+`.
    """

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@attrs.frozen
class LlmReply:
    """What a model answered: text, tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None


@attrs.frozen
class TextDelta:
    """A piece of the answer's text, as a streaming model wrote it."""

    text: str


@attrs.frozen
class ToolCallDelta:
    """A piece of the tool call at `index` of this reply: its id and name when first seen,
    and the next fragment of its JSON arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_fragment: str = ""


@attrs.frozen
class Finished:
    """The last event of a stream: the whole reply, as if it had not streamed."""

    reply: LlmReply


@attrs.frozen
class ModelSwitched:
    """A fallback: model `failed` could not answer (`kind`, `reason`) and `next_model` is asked instead.

    `withdrawn` says the failed model had already streamed part of its answer, which is void:
    a reader drops the text and tool-call pieces it had collected, and a user's message showing
    them is withdrawn (the `reset` a streaming client sees).
    """

    failed: str
    next_model: str
    kind: FailureKind
    reason: str
    withdrawn: bool = False

    @property
    def message(self) -> str:
        """The fallback in one line, for the turn's failures and the log."""
        withdrawn = f"; what {self.failed!r} had streamed was withdrawn" if self.withdrawn else ""
        return f"model {self.failed!r} failed, so {self.next_model!r} was asked instead{withdrawn}: {self.reason}"


StreamEvent = TextDelta | ToolCallDelta | Usage | ModelSwitched | Finished
"""What `LLM.stream` yields: deltas and usage in any number (a `FallbackLLM` also says when
it moves to its next model), then one `Finished`."""
