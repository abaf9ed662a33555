"""`ScriptedLLM`: a model that answers from a script, so a turn runs with no network."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeAlias

import attrs

from agentloop.errors import LlmCallError
from agentloop.messages import LlmReply, LlmRequest, StreamEvent, ToolCall
from agentloop.outcome import FailureKind, converter
from agentloop.streaming import collect, reply_events


@attrs.frozen
class StreamCut:
    """A script step whose stream breaks: the first `after` events of `reply`'s stream, then `error`."""

    reply: LlmReply
    after: int
    error: BaseException


ScriptStep: TypeAlias = "LlmReply | str | StreamCut | BaseException"
"""A reply (`str` is shorthand for a text reply), a stream cut off midway, or an exception to raise."""
ReplyFunction: TypeAlias = Callable[[LlmRequest], "ScriptStep | Awaitable[ScriptStep]"]

_call_ids = itertools.count(1)


class ScriptedLLM:
    """Answers each call with the next step of its script, or from a function; it streams too.

    `ScriptedLLM(["hi"])` replies "hi" once; `ScriptedLLM(lambda request: ...)` computes
    each reply from the request. Exceptions in the script are raised (an `LlmCallError`
    the way a real adapter would). Every request is kept in `requests`. `latency` makes
    each call wait that many seconds before its first event (for deadline tests). Running
    out of script raises an `LlmCallError` saying how many replies were used.

    `stream` sends a reply's text and each tool call's arguments in pieces of `chunk`
    characters (the whole at once without it), waiting `pace` seconds before each piece
    after the first, so a reader can watch the answer grow; a `ScriptedLLM.cut(...)` step
    breaks its stream midway, and `complete` (the collected stream) raises its error.
    """

    def __init__(
        self,
        script: Iterable[ScriptStep] | ReplyFunction = (),
        *,
        model: str = "scripted",
        latency: float = 0.0,
        chunk: int | None = None,
        pace: float = 0.0,
    ) -> None:
        if chunk is not None and chunk < 1:
            raise ValueError(f"chunk must be a positive number of characters, got {chunk}")
        if pace < 0:
            raise ValueError(f"pace is seconds between streamed pieces and cannot be negative, got {pace}")
        self.model = model
        self.latency = latency
        self.chunk = chunk
        self.pace = pace
        self.requests: list[LlmRequest] = []
        self._function: ReplyFunction | None = script if callable(script) else None
        self._script: list[ScriptStep] = [] if callable(script) else list(script)
        self._position = 0

    @staticmethod
    def tool_call(name: str, arguments: dict[str, Any] | None = None, *, text: str | None = None) -> LlmReply:
        """A reply asking for one tool call (a fresh call id each time)."""
        return LlmReply(content=text, tool_calls=(ToolCall(f"call_{next(_call_ids)}", name, dict(arguments or {})),))

    @staticmethod
    def answer(value: Any) -> str:
        """A structured answer: `value` (an attrs instance, say) as the JSON text a model would write."""
        return json.dumps(converter.unstructure(value))

    @staticmethod
    def cut(reply: LlmReply | str, after: int, error: BaseException | None = None) -> StreamCut:
        """A step that streams the first `after` events of `reply`, then fails with `error`
        (by default a retryable `LlmCallError`: the connection closed mid-stream)."""
        if after < 0:
            raise ValueError(f"after counts stream events and cannot be negative, got {after}")
        whole = LlmReply(content=reply) if isinstance(reply, str) else reply
        broken = error or LlmCallError(
            "the connection to the model closed in the middle of its answer", kind=FailureKind.UNKNOWN, retryable=True
        )
        return StreamCut(whole, after, broken)

    def add(self, *steps: ScriptStep) -> ScriptedLLM:
        """Append steps to the script; returns self for chaining."""
        if self._function is not None:
            raise TypeError("this ScriptedLLM answers from a function; it has no script to extend")
        self._script.extend(steps)
        return self

    @property
    def remaining(self) -> int:
        """How many scripted steps are still unused."""
        return len(self._script) - self._position

    async def complete(self, request: LlmRequest) -> LlmReply:
        return await collect(self.stream(request))

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        step = await self._next(request)
        if isinstance(step, BaseException):
            raise step
        cut = step if isinstance(step, StreamCut) else None
        if isinstance(step, StreamCut):
            reply = step.reply
        else:
            reply = LlmReply(content=step) if isinstance(step, str) else step
        events = list(reply_events(reply if reply.model is not None else attrs.evolve(reply, model=self.model), self.chunk))
        breaks_at = len(events) if cut is None else min(cut.after, len(events) - 1)  # a cut stream never finishes
        for index, event in enumerate(events[:breaks_at]):
            if self.pace and index:
                await asyncio.sleep(self.pace)
            yield event
        if cut is not None:
            raise cut.error

    async def _next(self, request: LlmRequest) -> ScriptStep:
        if self._function is not None:
            produced = self._function(request)
            return await produced if inspect.isawaitable(produced) else produced
        if self._position < len(self._script):
            self._position += 1
            return self._script[self._position - 1]
        raise LlmCallError(
            f"ScriptedLLM ran out of replies after {self._position}; add more with .add(...)",
            kind=FailureKind.UNKNOWN,
        )
