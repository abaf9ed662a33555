"""`ScriptedLLM`: a model that answers from a script, so a turn runs with no network."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeAlias

from agentloop.errors import LlmCallError
from agentloop.messages import LlmReply, LlmRequest, ToolCall
from agentloop.outcome import FailureKind

ScriptStep: TypeAlias = "LlmReply | str | BaseException"
"""A reply (`str` is shorthand for a text reply) or an exception to raise."""
ReplyFunction: TypeAlias = Callable[[LlmRequest], "LlmReply | str | Awaitable[LlmReply | str]"]

_call_ids = itertools.count(1)


class ScriptedLLM:
    """Answers each `complete` with the next step of its script, or from a function.

    `ScriptedLLM(["hi"])` replies "hi" once; `ScriptedLLM(lambda request: ...)` computes
    each reply from the request. Exceptions in the script are raised (an `LlmCallError`
    the way a real adapter would). Every request is kept in `requests`. `latency` makes
    each call take that many seconds (for deadline tests). Running out of script raises
    an `LlmCallError` saying how many replies were used.
    """

    def __init__(
        self,
        script: Iterable[ScriptStep] | ReplyFunction = (),
        *,
        model: str = "scripted",
        latency: float = 0.0,
    ) -> None:
        self.model = model
        self.latency = latency
        self.requests: list[LlmRequest] = []
        self._function: ReplyFunction | None = script if callable(script) else None
        self._script: list[ScriptStep] = [] if callable(script) else list(script)
        self._position = 0

    @staticmethod
    def tool_call(name: str, arguments: dict[str, Any] | None = None, *, text: str | None = None) -> LlmReply:
        """A reply asking for one tool call (a fresh call id each time)."""
        return LlmReply(content=text, tool_calls=(ToolCall(f"call_{next(_call_ids)}", name, dict(arguments or {})),))

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
        self.requests.append(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self._function is not None:
            produced = self._function(request)
            step: ScriptStep = await produced if inspect.isawaitable(produced) else produced
        elif self._position < len(self._script):
            step = self._script[self._position]
            self._position += 1
        else:
            raise LlmCallError(
                f"ScriptedLLM ran out of replies after {self._position}; add more with .add(...)",
                kind=FailureKind.UNKNOWN,
            )
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            return LlmReply(content=step, model=self.model)
        return step if step.model is not None else LlmReply(step.content, step.tool_calls, self.model)
