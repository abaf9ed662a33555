"""AgentLoop: validates a pipeline of systems once, then runs turns through it."""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Callable, Iterable, Sequence
from time import perf_counter
from typing import Any

import attrs
import structlog

from agentloop._containment import passes_through, running_task
from agentloop._log import get_logger
from agentloop._session_gates import SessionGates
from agentloop.context import ALWAYS_READABLE, Access, AgentContext, IncomingMessage, Session, declared_access
from agentloop.errors import MissingComponentError, PipelineError, StoreUnavailableError, TurnInProgressError, UndeclaredAccessError
from agentloop.messages import ChatMessage
from agentloop.mid_turn import Interruption, MidTurnPolicy, waiting_behind
from agentloop.outcome import FailureEvent, FailureKind, FailureSource, FinishReason, resolve_finish_reason
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.metrics import Metrics
from agentloop.ports.telemetry import Span
from agentloop.system import System
from agentloop.telemetry import TELEMETRY

SESSION_ID = "agentloop.session.id"
TURN_ID = "agentloop.turn.id"
SYSTEM = "agentloop.system"
OUTCOME = "agentloop.outcome"
FINISH_REASON = "agentloop.finish_reason"
FAILURES = "agentloop.failures"


@attrs.frozen
class PipelineRow:
    order: int
    name: str
    reads: tuple[type, ...]
    writes: tuple[type, ...]
    always_run: bool
    optional_reads: tuple[type, ...] = ()

    @property
    def all_reads(self) -> tuple[type, ...]:
        return (*self.reads, *self.optional_reads)


def _names(types: Sequence[type]) -> str:
    return ", ".join(t.__name__ for t in types) or "-"


def _reads_cell(row: PipelineRow) -> str:
    """The reads of a row, optional ones marked with `?`."""
    return ", ".join([t.__name__ for t in row.reads] + [f"{t.__name__}?" for t in row.optional_reads]) or "-"


@attrs.frozen
class PipelineDescription:
    """The ordered pipeline, renderable as a text table or a Mermaid flowchart.

    Optional reads are listed with the reads, marked `?` (`TurnPolicy?`).
    """

    rows: tuple[PipelineRow, ...]
    inputs: tuple[type, ...] = ()

    def to_text(self) -> str:
        header = ("order", "name", "reads", "writes")
        table = [header] + [
            (str(r.order), r.name + (" (always_run)" if r.always_run else ""), _reads_cell(r), _names(r.writes))
            for r in self.rows
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        """Solid arrows are run order; dotted arrows carry a component to its reader."""
        lines = ["flowchart TD"]
        for i, row in enumerate(self.rows):
            lines.append(f'    s{i}["{row.order} {row.name}"]')
        for i in range(1, len(self.rows)):
            lines.append(f"    s{i - 1} --> s{i}")
        for i, row in enumerate(self.rows):
            for read in row.all_reads:
                writer = _last_writer(self.rows[:i], read)
                if writer is not None:
                    lines.append(f"    s{writer} -. {read.__name__} .-> s{i}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _last_writer(rows: Sequence[PipelineRow], component: type) -> int | None:
    for index in range(len(rows) - 1, -1, -1):
        if component in rows[index].writes:
            return index
    return None


def _check_declaration(system: System) -> None:
    label = type(system).__name__
    if not isinstance(getattr(system, "order", None), int) or isinstance(system.order, bool):
        raise PipelineError(f"system {label} needs an integer class attribute `order`")
    if not isinstance(system.name, str) or not system.name:
        raise PipelineError(f"system {label} needs a non-empty string `name`")
    for attribute in ("reads", "optional_reads", "writes"):
        declared = getattr(system, attribute)
        if not isinstance(declared, tuple) or not all(isinstance(t, type) for t in declared):
            raise PipelineError(f"system {system.name!r}: `{attribute}` must be a tuple of types, got {declared!r}")
    if type(system).process is System.process:
        raise PipelineError(f"system {system.name!r} does not implement process(ctx)")


def validate_pipeline(systems: Sequence[System], inputs: Iterable[type] = ()) -> tuple[System, ...]:
    """Sort `systems` by order (stable) and check their declared access.

    Raises `PipelineError` for a duplicate name, a read (optional or not) whose only
    writers run later and that is not a turn input, or two systems of equal order
    writing one type. A read that no system writes is allowed: it is simply absent.
    """
    for system in systems:
        if not isinstance(system, System):
            raise PipelineError(f"{system!r} is not a System instance")
        _check_declaration(system)
    ordered = tuple(sorted(systems, key=lambda s: s.order))
    seen: dict[str, System] = {}
    for system in ordered:
        if system.name in seen:
            raise PipelineError(
                f"duplicate system name {system.name!r}: {type(seen[system.name]).__name__} "
                f"and {type(system).__name__}; give one of them another `name`"
            )
        seen[system.name] = system
    available = set(ALWAYS_READABLE) | set(inputs)
    for index, system in enumerate(ordered):
        for component in (*system.reads, *system.optional_reads):
            if component in available or component in system.writes:
                continue
            if any(component in earlier.writes for earlier in ordered[:index]):
                continue
            later = next((s for s in ordered[index + 1 :] if component in s.writes), None)
            if later is not None:
                raise PipelineError(
                    f"{system.name} (order {system.order}) reads {component.__name__}, which is "
                    f"written only by {later.name} (order {later.order}), which runs later; "
                    f"move {later.name} earlier or declare {component.__name__} as a turn input"
                )
    for index, system in enumerate(ordered):
        for other in ordered[index + 1 :]:
            if other.order != system.order:
                break
            clash = [t for t in system.writes if t in other.writes]
            if clash:
                raise PipelineError(
                    f"{system.name} and {other.name} both have order {system.order} and both "
                    f"write {_names(clash)}; which write wins would depend on list order, so "
                    f"give them different orders"
                )
    return ordered


@attrs.frozen
class _Step:
    name: str
    process: Callable[[AgentContext], Any]
    is_async: bool
    should: Callable[[AgentContext], bool] | None
    always_run: bool
    access: Access


def _step(system: System) -> _Step:
    overrides_should = type(system).should_process is not System.should_process
    return _Step(
        name=system.name,
        process=system.process,
        is_async=inspect.iscoroutinefunction(system.process),
        should=system.should_process if overrides_should else None,
        always_run=system.always_run,
        access=declared_access(system),
    )


class AgentLoop:
    """Runs turns through an ordered, validated pipeline of systems.

    A system exception never aborts a turn: it becomes a `FailureEvent` and the next
    system runs (any `BaseException`, `SystemExit` too, but `KeyboardInterrupt` and cancellation); an access outside the running system's declaration is one too (kind
    VALIDATION, from `UndeclaredAccessError`). After `turn_timeout` seconds only `always_run` systems run, and an
    async one is interrupted `always_run_grace` seconds past the deadline, so a hung
    channel cannot hold the session forever. Turns of one session run one at a time
    in arrival order; different sessions run concurrently, at most `max_concurrent_turns`
    at a time per event loop when it is set (the rest wait in arrival order, their
    `turn_timeout` not yet started), so an overloaded process keeps its loop's passes
    short instead of slowing every turn at once. `mid_turn` (a `MidTurnPolicy`) says what a message
    gets while a turn of its session runs. With telemetry switched on
    (`TELEMETRY`), each turn is a span with a child span per system run.
    """

    def __init__(
        self,
        systems: Sequence[System],
        *,
        turn_timeout: float | None = None,
        inputs: Iterable[type] = (),
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        always_run_grace: float = 5.0,
        max_concurrent_turns: int | None = None,
        mid_turn: MidTurnPolicy | str = MidTurnPolicy.QUEUE,
    ) -> None:
        if max_concurrent_turns is not None and max_concurrent_turns < 1:
            raise ValueError(f"max_concurrent_turns must be at least 1 (or None for no bound), got {max_concurrent_turns!r}")
        if turn_timeout is not None and turn_timeout <= 0:
            raise ValueError(f"turn_timeout must be positive seconds, got {turn_timeout!r}")
        if always_run_grace < 0:
            raise ValueError(f"always_run_grace must not be negative seconds, got {always_run_grace!r}")
        self.always_run_grace = always_run_grace
        self.mid_turn = MidTurnPolicy(mid_turn)
        self.inputs = tuple(inputs)
        self.systems = validate_pipeline(systems, self.inputs)
        self.turn_timeout = turn_timeout
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self._logger = get_logger("agentloop")
        self._steps = tuple(_step(system) for system in self.systems)
        self._gates = SessionGates()
        self.max_concurrent_turns = max_concurrent_turns
        # A semaphore belongs to one event loop; run_turn may be awaited on several.
        self._admission: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()

    def describe(self) -> PipelineDescription:
        rows = tuple(
            PipelineRow(s.order, s.name, s.reads, s.writes, s.always_run, s.optional_reads) for s in self.systems
        )
        return PipelineDescription(rows, self.inputs)

    def run_turn_sync(
        self,
        session: Session,
        incoming: IncomingMessage,
        *,
        history: Sequence[ChatMessage] = (),
        components: Iterable[object] = (),
    ) -> AgentContext:
        """`run_turn` for scripts, threads and sync tests; not callable from a running event loop.

        It waits at the same per-session gate as `run_turn`, so turns of one session run
        one at a time whether threads, event loops or both start them.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_turn_sync was called inside a running event loop; await run_turn instead")
        if not self._taken_at_once(session.id):
            self._gates.acquire_blocking(session.id)
        try:
            return asyncio.run(self._run(session, incoming, history, components))
        finally:
            self._gates.release(session.id)

    async def run_turn(
        self,
        session: Session,
        incoming: IncomingMessage,
        *,
        history: Sequence[ChatMessage] = (),
        components: Iterable[object] = (),
        turn_id: str | None = None,
        interruption: Interruption | None = None,
    ) -> AgentContext:
        """Run one turn and return its finished context (`ctx.turn_outcome`, `ctx.failures`).

        `components` supplies the turn inputs named in `inputs`; `history` is the
        session's earlier messages, exposed read-only as `ctx.history`. `turn_id` names
        the turn (a fresh id by default): a worker uses the message's id, which is what
        the submitter knows the turn by when it gives feedback on it. `interruption`: see `Interruption`.
        """
        if not self._taken_at_once(session.id):
            await self._gates.acquire(session.id)
        try:
            if self.max_concurrent_turns is None:
                return await self._run(session, incoming, history, components, turn_id, interruption)
            async with self._slots():
                return await self._run(session, incoming, history, components, turn_id, interruption)
        finally:
            self._gates.release(session.id)

    def _taken_at_once(self, session_id: str) -> bool:
        """Under REJECT, take the session's gate now or raise `TurnInProgressError`; else False (wait for it)."""
        if self.mid_turn is MidTurnPolicy.REJECT and not self._gates.take_if_free(session_id):
            raise TurnInProgressError(session_id)
        return self.mid_turn is MidTurnPolicy.REJECT

    def _interruption(self, session_id: str) -> Interruption | None:
        """Under INTERRUPT, what a turn of `session_id` asks at its safe points: does a turn wait behind it?"""
        return waiting_behind(lambda: self._gates.waiting(session_id)) if self.mid_turn is MidTurnPolicy.INTERRUPT else None

    def _slots(self) -> asyncio.Semaphore:
        """This event loop's `max_concurrent_turns` slots (taken after the session's gate, so
        a turn waiting for its session holds none)."""
        loop, limit = asyncio.get_running_loop(), self.max_concurrent_turns
        assert limit is not None, "only run_turn with a bound asks for slots"
        slots = self._admission.get(loop)
        if slots is None:
            slots = self._admission[loop] = asyncio.Semaphore(limit)
        return slots

    async def _run(
        self,
        session: Session,
        incoming: IncomingMessage,
        history: Sequence[ChatMessage],
        components: Iterable[object],
        turn_id: str | None = None, interruption: Interruption | None = None,
    ) -> AgentContext:
        clock = self.clock
        started = perf_counter()
        deadline = None if self.turn_timeout is None else clock.monotonic() + self.turn_timeout
        ctx = AgentContext(
            session, incoming, history=history, deadline=deadline, clock=clock, components=components, turn_id=turn_id,
            interruption=interruption or self._interruption(session.id),
        )
        log, verbose, debug = self._turn_logger(ctx)
        timed_out = False
        tracer = TELEMETRY.tracer
        turn_span = None if tracer is None else tracer.start_span("turn", {SESSION_ID: session.id, TURN_ID: ctx.turn_id})
        span: Span | None = None
        watched = debug or tracer is not None
        task = running_task()
        try:
            for step in self._steps:
                if deadline is not None and not timed_out and clock.monotonic() >= deadline:
                    timed_out = True
                    self._record_timeout(ctx, step.name, "was skipped: the turn deadline had passed")
                if timed_out and not step.always_run:
                    continue
                ctx._enter(step.name, step.access)  # the sets precomputed, not ctx._running(system)'s
                if tracer is not None:
                    span = tracer.start_span(f"system {step.name}", {SYSTEM: step.name})
                t0 = perf_counter() if watched else 0.0  # read only when watched
                result = "ok"
                budget = None if deadline is None or not step.is_async else self._budget(step, deadline)
                try:
                    if step.should is not None and not step.should(ctx):
                        result = "skipped"
                    elif not step.is_async:
                        step.process(ctx)
                    elif budget is None:
                        await step.process(ctx)
                    else:
                        async with budget:
                            await step.process(ctx)
                except BaseException as exc:  # SystemExit from a system too: its failure, not the process's end
                    if passes_through(exc, task):
                        raise
                    result = self._system_failed(ctx, step, exc, budget is not None and budget.expired(), log)
                    timed_out = timed_out or result == "timeout"
                if watched:  # tracing or debug logging: off in production, one check per system
                    _system_watched(span, result, ctx, log if debug else None, step.name, t0)
                    span = None
            ctx._enter(None, None)
            self._finish(ctx, timed_out)
        finally:
            if turn_span is not None:
                _end_turn_span(turn_span, span, ctx)
        self._turn_finished(ctx, (perf_counter() - started) * 1000.0, verbose, log)
        return ctx

    def _budget(self, step: _Step, deadline: float) -> asyncio.Timeout:
        """The time an async system may take: up to the turn deadline, plus the grace of an always_run one."""
        limit = deadline - self.clock.monotonic()
        if step.always_run:
            limit = max(limit, 0.0) + self.always_run_grace
        return asyncio.timeout(limit)

    def _turn_logger(self, ctx: AgentContext) -> tuple[Any, bool, bool]:
        """The turn's bound logger, whether to log the turn's end (`verbose`) and each system (`debug`)."""
        log = self._logger.bind(turn_id=ctx.turn_id, session_id=ctx.session.id)
        # Unconfigured structlog prints every level to stdout, where a console bot
        # answers: the loop then logs only failures. Any configured level is honoured.
        verbose = structlog.is_configured()
        # Only structlog's filtering loggers know their level; others filter downstream.
        filtering = hasattr(type(log), "is_enabled_for")
        return log, verbose, verbose and (not filtering or log.is_enabled_for(logging.DEBUG))

    def _system_failed(self, ctx: AgentContext, step: _Step, exc: BaseException, out_of_time: bool, log: Any) -> str:
        """Record what a system's exception means for the turn: a timeout when its time budget ran
        out (`out_of_time`), else one failure naming it; returns the run's result ("timeout" or "error")."""
        if out_of_time:
            if step.always_run:
                what = f"was interrupted {self.always_run_grace}s after the turn deadline"
            else:
                what = "was interrupted: the turn deadline passed"
            self._record_timeout(ctx, step.name, what)
            return "timeout"
        kind = (FailureKind.VALIDATION if isinstance(exc, UndeclaredAccessError)
                else FailureKind.UNAVAILABLE if isinstance(exc, StoreUnavailableError) else FailureKind.EXCEPTION)
        earlier = ctx.failures  # before this one: a missing component is then most likely what an earlier failure did not make
        ctx.add_failure(FailureEvent(FailureSource.SYSTEM, step.name, kind, f"{type(exc).__name__}: {exc}", self.clock.now()))
        if isinstance(exc, StoreUnavailableError):  # an outage, not a bug: one line, the turn's failure says the rest
            log.error("system.failed", system=step.name, error=str(exc))
        elif isinstance(exc, MissingComponentError) and earlier:  # a consequence: the earlier failure was logged
            log.error("system.failed", system=step.name, error=str(exc), after=earlier[-1].component)
        else:
            log.error("system.failed", system=step.name, exc_info=exc)
        metrics = TELEMETRY.metrics_for(self.metrics)
        if metrics is not None:
            metrics.increment("agentloop.system.failures", labels={"system": step.name})
        return "error"

    def _turn_finished(self, ctx: AgentContext, duration_ms: float, verbose: bool, log: Any) -> None:
        """Log the turn's end (when logging is configured) and observe its duration."""
        outcome = ctx.turn_outcome
        reason = outcome.finish_reason.value if outcome is not None else None
        if verbose:
            log.info("turn.finished", finish_reason=reason, failures=len(ctx.failures), duration_ms=duration_ms)
        metrics = self.metrics if TELEMETRY.metrics is None else TELEMETRY.metrics_for(self.metrics)
        if metrics is not None:
            metrics.observe("agentloop.turn.duration_ms", duration_ms)

    def _record_timeout(self, ctx: AgentContext, system: str, what: str) -> None:
        message = f"{system} {what} ({self.turn_timeout}s)"
        ctx.add_failure(FailureEvent(FailureSource.SYSTEM, system, FailureKind.TIMEOUT, message, self.clock.now()))

    @staticmethod
    def _finish(ctx: AgentContext, timed_out: bool) -> None:
        """Make the outcome carry every failure of the turn and DEADLINE if it ran out."""
        outcome = ctx.turn_outcome
        if outcome is None:
            return
        reason = resolve_finish_reason((outcome.finish_reason, FinishReason.DEADLINE)) if timed_out else outcome.finish_reason
        failures = ctx.failures
        if reason is not outcome.finish_reason or failures != outcome.failures:
            ctx.set(attrs.evolve(outcome, finish_reason=reason, failures=failures))


def _system_watched(span: Span | None, result: str, ctx: AgentContext, debug_log: Any, system: str, started: float) -> None:
    """End the system's span and log its run at debug level (`debug_log` given), whichever is on."""
    if span is not None:
        _end_system_span(span, result, ctx)
    if debug_log is not None:
        debug_log.debug("system.run", system=system, duration_ms=(perf_counter() - started) * 1000.0, outcome=result)


def _end_system_span(span: Span, result: str, ctx: AgentContext) -> None:
    """End a system's span with how it went (ok, error, skipped, timeout); the last failure says why."""
    span.set_attribute(OUTCOME, result)
    if result in ("error", "timeout"):
        span.fail(ctx.failures[-1].message)
    span.end()


def _end_turn_span(turn: Span, system: Span | None, ctx: AgentContext) -> None:
    """End the turn's span with its finish reason and failure count; a system still open was cancelled."""
    turn.set_attribute(FAILURES, len(ctx.failures))
    if system is not None:
        system.set_attribute(OUTCOME, "cancelled")
        system.fail("the turn was cancelled while this system ran")
        system.end()
        turn.fail("the turn was cancelled")
    elif (outcome := ctx.turn_outcome) is not None:
        turn.set_attribute(FINISH_REASON, outcome.finish_reason.value)
        if outcome.finish_reason is FinishReason.ERROR:
            turn.fail("the turn finished with an error")
    turn.end()
