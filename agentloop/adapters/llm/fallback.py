"""`FallbackLLM`: models in order of preference; a call moves to the next when one fails the
way an outage does, and a model that keeps failing is skipped for a while (its circuit breaker).

Provider-neutral: it takes any `LLM` implementations and needs no extra. Why the breaker is
written here rather than taken from a library: docs/adr/0022-fallback-models.md.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing

import attrs

from agentloop._log import get_logger
from agentloop.errors import EndpointUnreachableError, LlmCallError, ModelServerError
from agentloop.messages import Finished, LlmReply, LlmRequest, ModelSwitched, StreamEvent, TextDelta, ToolCallDelta
from agentloop.outcome import FailureKind
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.llm import LLM, CheckableLLM
from agentloop.streaming import collect, events_of

__all__ = ["DEFAULT_FALLBACK_STATUSES", "FallbackLLM", "FallbackOn"]

_log = get_logger("agentloop.llm_fallback")

DEFAULT_FALLBACK_STATUSES = frozenset({404, 429, *range(500, 600)})
"""The HTTP statuses a call moves on after: an unknown model (404), rate limiting that outlasted
the adapter's retries (429), and server failures (5xx)."""


@attrs.frozen
class FallbackOn:
    """Which failed calls move to the next model; a predicate on the `LlmCallError`.

    A `ModelServerError` moves on when its status is in `statuses`; any other error moves on
    when `connection_errors` is set and the adapter marked it retryable: the server out of reach,
    an attempt timing out, a stream cut off. A 400 (the request is wrong) or a 401 (the key is)
    would fail on every model, so they do not move on by default.
    """

    statuses: frozenset[int] = DEFAULT_FALLBACK_STATUSES
    connection_errors: bool = True

    def __call__(self, error: LlmCallError) -> bool:
        if isinstance(error, ModelServerError):
            return error.status in self.statuses
        return self.connection_errors and error.retryable


@attrs.define
class _Breaker:
    """One model's consecutive failures, and until when (monotonic seconds) it is skipped."""

    failures: int = 0
    resting_until: float | None = None

    def available(self, now: float) -> bool:
        """Closed, or its rest is over: then one call tries it again, and one more failure rests it again."""
        return self.resting_until is None or now >= self.resting_until


class FallbackLLM:
    """Asks `models` in order; a call that fails as `fall_back_on` says moves to the next.

    Each model has a circuit breaker: after `failures_to_rest` consecutive such failures it is
    skipped for `rest` seconds (on `clock`'s monotonic time), then tried again; a success
    resets it. When every model is resting, a call fails at once (retryable). A request's
    `model` is not passed on: each model answers as itself, and the reply's `model` names
    the one that answered. Its `time_left` shrinks by the time the earlier models took.

    Streaming: before each move the stream carries a `ModelSwitched`; when the failed model had
    already streamed text or tool-call pieces, it is marked `withdrawn` and readers drop them
    (the tool loop withdraws the user's message and records the fallback as a failure).
    """

    def __init__(
        self,
        models: Sequence[LLM],
        *,
        fall_back_on: Callable[[LlmCallError], bool] = FallbackOn(),
        failures_to_rest: int = 3,
        rest: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        if not models:
            raise ValueError("a FallbackLLM needs at least one model")
        if failures_to_rest < 1:
            raise ValueError(f"failures_to_rest must be at least 1, got {failures_to_rest}")
        if rest < 0:
            raise ValueError(f"rest is seconds and cannot be negative, got {rest}")
        self.models = tuple(models)
        self.names = tuple(_name(model, position) for position, model in enumerate(self.models))
        self.model = self.names[0]
        self.fall_back_on = fall_back_on
        self.failures_to_rest = failures_to_rest
        self.rest = rest
        self._clock = clock or SystemClock()
        self._breakers = [_Breaker() for _ in self.models]

    def resting(self) -> tuple[str, ...]:
        """The names of the models their breakers skip now."""
        now = self._clock.monotonic()
        return tuple(name for name, breaker in zip(self.names, self._breakers, strict=True) if not breaker.available(now))

    async def complete(self, request: LlmRequest) -> LlmReply:
        async with aclosing(self.stream(request)) as events:
            return await collect(events)

    async def stream(self, request: LlmRequest) -> AsyncGenerator[StreamEvent, None]:
        """The first model's stream that finishes, with a `ModelSwitched` before each move to the next."""
        started = self._clock.monotonic()
        order = [index for index, breaker in enumerate(self._breakers) if breaker.available(started)]
        if not order:
            raise LlmCallError(self._all_resting(started), kind=FailureKind.UNKNOWN, retryable=True)
        for position, index in enumerate(order):
            asked = attrs.evolve(request, model=None, time_left=self._left(request, started))
            streamed, error = False, None
            try:
                async with aclosing(events_of(self.models[index], asked)) as events:
                    async for event in events:
                        if isinstance(event, Finished):
                            self._breakers[index] = _Breaker()
                            reply = event.reply
                            yield event if reply.model else Finished(attrs.evolve(reply, model=self.names[index]))
                            return
                        streamed = streamed or isinstance(event, TextDelta | ToolCallDelta)
                        yield event
            except LlmCallError as exc:
                if not self.fall_back_on(exc):
                    raise
                self._failed(index, exc)
                left = self._left(request, started)
                if position + 1 == len(order) or (left is not None and left <= 0):
                    raise
                error = exc
            if error is None:
                return  # a stream that ended without its reply: `collect` says so
            switched = ModelSwitched(self.names[index], self.names[order[position + 1]], error.kind, str(error), streamed)
            _log.info("llm.fallback", failed=switched.failed, next_model=switched.next_model, withdrawn=streamed, error=str(error))
            yield switched

    @property
    def context_window(self) -> int | None:
        """The smallest context window its models' servers gave (a prompt must fit whichever answers), or None."""
        windows = [w for w in (getattr(model, "context_window", None) for model in self.models) if isinstance(w, int)]
        return min(windows, default=None)

    def check(self, *, timeout: float = 5.0) -> None:
        """The start-up check of each model that has one: any model's error is raised, except that
        a server out of reach is only logged while another model's is reachable."""
        unreachable: list[EndpointUnreachableError] = []
        checked = 0
        for name, model in zip(self.names, self.models, strict=True):
            if not isinstance(model, CheckableLLM):
                continue
            checked += 1
            try:
                model.check(timeout=timeout)
            except EndpointUnreachableError as error:
                _log.warning("llm.check_unreachable", model=name, error=str(error))
                unreachable.append(error)
        if unreachable and len(unreachable) == checked:
            raise unreachable[0]

    def _failed(self, index: int, error: LlmCallError) -> None:
        breaker = self._breakers[index]
        breaker.failures += 1
        if breaker.failures >= self.failures_to_rest:
            now = self._clock.monotonic()
            breaker.resting_until = now + self.rest
            _log.warning("llm.model_resting", model=self.names[index], failures=breaker.failures, rest_s=self.rest, error=str(error))

    def _left(self, request: LlmRequest, started: float) -> float | None:
        if request.time_left is None:
            return None
        return request.time_left - (self._clock.monotonic() - started)

    def _all_resting(self, now: float) -> str:
        soonest = min(breaker.resting_until or now for breaker in self._breakers) - now
        return (
            f"every model failed {self.failures_to_rest} times in a row and is resting "
            f"({', '.join(map(repr, self.names))}); the first is tried again in {soonest:.0f}s"
        )


def _name(model: LLM, position: int) -> str:
    """What messages call `model`: its `model` name, else its class and place in the list."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else f"{type(model).__name__} #{position + 1}"
