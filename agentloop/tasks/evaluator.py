"""The evaluator: runs a template's tree of atomic, sequential, reduce and script tasks.

An atomic task is one auto-mode turn of the `AgentLoop` the caller gives (see
`agentloop.tasks.turn` for what the turn receives and how it replies). `{{var}}` in
descriptions and script arguments is replaced from the inputs, once and literally.
Inputs flow down to every child task; context flows down according to each child's
inherit_context. A task's context is *fresh* (its turns may retrieve notes and memory)
when its own fresh_context is enabled, or when it inherits (full or subset) from a task
whose context is fresh: so the atomic tasks inside a reduce (defaults: reduce fresh,
inner and reduction tasks inherit full) retrieve, while a sequence's steps do not.
Notes go from one task to the next exactly as produced (I10).

A run either returns a COMPLETE `TaskResult` or raises a `TaskError`:
`TaskFailedError` (with a `TaskFailureReason`) or `ResourceExhaustedError`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence

import attrs

from agentloop._log import get_logger
from agentloop.context import IncomingMessage, Session
from agentloop.tasks.errors import ResourceExhaustedError, TaskFailedError, UnknownTemplateError
from agentloop.loop import AgentLoop
from agentloop.outcome import FinishReason
from agentloop.ports.clock import Clock, SystemClock
from agentloop.tasks.registry import TemplateRegistry, refuse_script
from agentloop.tasks.results import (
    SequentialHistory,
    SubtaskRequest,
    TaskFailureReason,
    TaskOutput,
    TaskResult,
    TaskStatus,
)
from agentloop.tasks.script import DEFAULT_SCRIPT_OUTPUT_LIMIT, refuse_injected_options, run_command
from agentloop.tasks.settings import (
    AccumulationFormat,
    ContextOverrides,
    InheritContext,
    Operator,
    Position,
    Subtype,
    resolve,
)
from agentloop.tasks.template import (
    AtomicTemplate,
    ReduceTemplate,
    ScriptTemplate,
    SequentialTemplate,
    TaskTemplate,
    as_subtask,
)
from agentloop.tasks.turn import TaskTurn, parse_reply

InputValue = str | Sequence[str]
"""An input: a string, or (for the items a reduce runs over) a sequence of strings."""

DEFAULT_MAX_DEPTH = 5
DEFAULT_MAX_CONTINUATIONS = 5
DEFAULT_SCRIPT_TIMEOUT = 60.0
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@attrs.define
class TaskTrace:
    """What one evaluation did: how many turns it ran and what each task answered.

    Attempt notes use it as the attempt's output.
    """

    turns: int = 0
    entries: list[str] = attrs.Factory(list)

    def add(self, label: str, text: str) -> None:
        self.entries.append(f"### {label}\n{text}")

    def render(self) -> str:
        return "\n\n".join(self.entries)


@attrs.frozen
class _Frame:
    """Where a task runs: its inputs, the context it is offered (and whether that context
    is fresh, i.e. gathered by retrieval), the history it sees, and its ancestry."""

    inputs: Mapping[str, InputValue]
    context: Mapping[str, str]
    chain: tuple[str, ...]
    trace: TaskTrace
    history: tuple[TaskOutput, ...] = ()
    depth: int = 0
    previous_notes: str | None = None
    fresh: bool = False


def _text(value: InputValue) -> str:
    return value if isinstance(value, str) else "\n".join(value)


def _transcript(result: TaskResult) -> str:
    """What a turn contributes to the trace: its content, then how it ended if not COMPLETE."""
    if result.status is TaskStatus.FAILED:
        reason = result.reason.value if result.reason else "failed"
        return f"{result.content}\nFAILED ({reason}): {result.detail}".lstrip()
    if result.subtask is not None:
        return f"{result.content}\nCONTINUATION: asked for subtask {result.subtask.key!r}".lstrip()
    return result.content


def substitute(text: str, values: Mapping[str, InputValue], label: str) -> str:
    """`text` with each `{{name}}` replaced by its value, in one literal pass."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise TaskFailedError(
                TaskFailureReason.INPUT_VALIDATION_FAILURE,
                f"task {label!r} uses {{{{{name}}}}} but no input {name!r} was given",
            )
        return _text(values[name])

    return _VARIABLE.sub(replace, text)


def inherited(template: TaskTemplate, offered: Mapping[str, str]) -> dict[str, str]:
    """The part of the parent's context this task takes, by its inherit_context setting."""
    mode = template.context.inherit_context
    if mode is InheritContext.FULL:
        return dict(offered)
    if mode is InheritContext.SUBSET:
        return {key: offered[key] for key in template.inputs if key in offered}
    return {}


class Evaluator:
    """Runs registered templates by name with inputs.

    `loop` runs the atomic tasks; each turn carries its `TaskTurn` and that task's
    `TurnPolicy` (declare `TaskTurn` in the loop's `inputs` if a system reads it). Subtasks nest at most `max_depth` deep; an atomic task may continue at most
    `max_continuations` times; scripts get `script_timeout` seconds unless the template
    says otherwise, keep at most `script_output_limit` bytes of stdout and of stderr, and
    run only if the registry allows scripts.
    """

    def __init__(
        self,
        registry: TemplateRegistry,
        loop: AgentLoop,
        *,
        session: Session | None = None,
        clock: Clock | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_continuations: int = DEFAULT_MAX_CONTINUATIONS,
        script_timeout: float = DEFAULT_SCRIPT_TIMEOUT,
        script_output_limit: int = DEFAULT_SCRIPT_OUTPUT_LIMIT,
    ) -> None:
        if max_depth < 0 or max_continuations < 0 or script_timeout <= 0 or script_output_limit <= 0:
            raise ValueError(
                "max_depth and max_continuations must be >= 0, script_timeout and script_output_limit > 0"
            )
        self.registry = registry
        self.loop = loop
        self.session = session or Session("tasks")
        self.clock: Clock = clock or SystemClock()
        self.max_depth = max_depth
        self.max_continuations = max_continuations
        self.script_timeout = script_timeout
        self.script_output_limit = script_output_limit
        self._log = get_logger("agentloop.tasks").bind(session_id=self.session.id)

    async def run(
        self,
        name: str,
        inputs: Mapping[str, InputValue] | None = None,
        *,
        context: Mapping[str, str] | None = None,
        previous_notes: str | None = None,
        trace: TaskTrace | None = None,
    ) -> TaskResult:
        """Run the template registered as `name`.

        `context` is what the top task may inherit; `previous_notes` (attempt notes) are
        shown to every atomic turn of the run; `trace` collects turns and answers.
        """
        return await self.run_template(
            self.registry.get(name), inputs, context=context, previous_notes=previous_notes, trace=trace
        )

    def run_sync(
        self,
        name: str,
        inputs: Mapping[str, InputValue] | None = None,
        *,
        context: Mapping[str, str] | None = None,
        previous_notes: str | None = None,
        trace: TaskTrace | None = None,
    ) -> TaskResult:
        """`run` for scripts and the command line; not callable inside a running event loop."""
        return asyncio.run(self.run(name, inputs, context=context, previous_notes=previous_notes, trace=trace))

    async def run_template(
        self,
        template: TaskTemplate,
        inputs: Mapping[str, InputValue] | None = None,
        *,
        context: Mapping[str, str] | None = None,
        previous_notes: str | None = None,
        trace: TaskTrace | None = None,
    ) -> TaskResult:
        frame = _Frame(
            inputs=dict(inputs or {}),
            context=dict(context or {}),
            chain=(template.name or template.label,),
            trace=trace if trace is not None else TaskTrace(),
            previous_notes=previous_notes,
        )
        result = await self._evaluate(template, frame)
        self._log.info("task.finished", task=template.label, turns=frame.trace.turns)
        return result

    async def _evaluate(self, template: TaskTemplate, frame: _Frame) -> TaskResult:
        missing = [name for name in template.inputs if name not in frame.inputs]
        if missing:
            raise TaskFailedError(
                TaskFailureReason.INPUT_VALIDATION_FAILURE,
                f"task {template.label!r} needs input(s) {', '.join(map(repr, missing))}",
            )
        settings = template.context
        inherits = settings.inherit_context is not InheritContext.NONE
        own = attrs.evolve(
            frame, context=inherited(template, frame.context), fresh=settings.fresh or (inherits and frame.fresh)
        )
        if isinstance(template, AtomicTemplate):
            return await self._atomic(template, own)
        if isinstance(template, SequentialTemplate):
            return await self._sequential(template, own)
        if isinstance(template, ReduceTemplate):
            return await self._reduce(template, own)
        return await self._script(template, own)

    async def _atomic(self, template: AtomicTemplate, frame: _Frame) -> TaskResult:
        instruction = substitute(template.description, frame.inputs, template.label)
        subtask_results: list[TaskOutput] = []
        continuations = 0
        while True:
            turn = TaskTurn(
                task_name=template.label,
                instruction=instruction,
                context=frame.context,
                history=frame.history,
                subtask_results=tuple(subtask_results),
                previous_notes=frame.previous_notes,
                fresh_context=frame.fresh,
                depth=frame.depth,
            )
            result = await self._turn(turn, frame.trace)
            if result.status is TaskStatus.FAILED:
                raise TaskFailedError(
                    result.reason or TaskFailureReason.TASK_REPORTED_FAILURE,
                    f"task {template.label!r} failed: {result.detail}",
                    result=result,
                )
            if result.status is TaskStatus.COMPLETE:
                return result
            if continuations == self.max_continuations:
                raise ResourceExhaustedError(
                    "continuations",
                    continuations + 1,
                    self.max_continuations,
                    f"task {template.label!r} asked for more than {self.max_continuations} subtasks in a row; "
                    f"raise max_continuations or split the task",
                )
            continuations += 1
            assert result.subtask is not None  # parse_reply guarantees it for CONTINUATION
            sub = await self._spawn(result.subtask, template, frame)
            subtask_results.append(TaskOutput(result.subtask.key, sub.content, sub.notes, self.clock.now()))

    async def _turn(self, turn: TaskTurn, trace: TaskTrace) -> TaskResult:
        trace.turns += 1
        incoming = IncomingMessage(turn.render(), auto_mode=True, metadata={"task": turn.task_name})
        ctx = await self.loop.run_turn(self.session, incoming, components=[turn, turn.policy])
        outcome = ctx.turn_outcome
        failures = "; ".join(f"{f.component}: {f.message}" for f in ctx.failures) or "no failure recorded"
        if outcome is None:
            result = TaskResult(
                "", TaskStatus.FAILED, reason=TaskFailureReason.EXECUTION_HALTED,
                detail=f"the turn ended without a TurnOutcome ({failures})",
            )
        elif outcome.finish_reason is not FinishReason.SUCCESS:
            result = TaskResult(
                outcome.assistant_text or "", TaskStatus.FAILED, reason=TaskFailureReason.EXECUTION_HALTED,
                detail=f"the turn finished with {outcome.finish_reason.value} ({failures})",
            )
        else:
            result = parse_reply(outcome.assistant_text)
        trace.add(turn.task_name, _transcript(result))
        self._log.debug("task.turn", task=turn.task_name, turn_id=ctx.turn_id, status=result.status.value)
        return result

    async def _spawn(self, request: SubtaskRequest, parent: AtomicTemplate, frame: _Frame) -> TaskResult:
        key = request.key
        if key in frame.chain:
            raise TaskFailedError(
                TaskFailureReason.SUBTASK_CYCLE,
                f"task {parent.label!r} requested subtask {key!r}, which would repeat the chain "
                f"{' -> '.join((*frame.chain, key))}",
            )
        if frame.depth + 1 > self.max_depth:
            raise ResourceExhaustedError(
                "subtask_depth",
                frame.depth + 1,
                self.max_depth,
                f"task {parent.label!r} requested subtask {key!r} at depth {frame.depth + 1}, past the "
                f"limit of {self.max_depth} (chain {' -> '.join((*frame.chain, key))})",
            )
        if request.template is not None:
            try:
                template = as_subtask(self.registry.get(request.template))
            except UnknownTemplateError as exc:
                raise TaskFailedError(
                    TaskFailureReason.INPUT_VALIDATION_FAILURE, f"task {parent.label!r} requested a subtask: {exc}"
                ) from None
        else:
            assert request.description is not None
            template = AtomicTemplate(
                name=None,
                description=request.description,
                context=resolve(Operator.ATOMIC, Subtype.SUBTASK, Position.TOP, ContextOverrides()),
                subtype=Subtype.SUBTASK,
                source=parent.source,
            )
        child = attrs.evolve(
            frame, inputs=dict(request.inputs), chain=(*frame.chain, key), history=(), depth=frame.depth + 1
        )
        return await self._evaluate(template, child)

    async def _sequential(self, template: SequentialTemplate, frame: _Frame) -> TaskResult:
        history = SequentialHistory(template.context.accumulation_format or AccumulationFormat.NOTES_ONLY)
        result = TaskResult("")
        for index, step in enumerate(template.steps):
            step_id = step.name or f"step-{index + 1}"
            visible = history.snapshot() if template.context.accumulates else ()
            step_frame = attrs.evolve(frame, history=visible)
            result = await self._child(template, step, step_frame, index, len(template.steps), history.outputs)
            history.record(step_id, result, self.clock.now())
        return TaskResult(result.content, TaskStatus.COMPLETE, result.notes)

    async def _reduce(self, template: ReduceTemplate, frame: _Frame) -> TaskResult:
        items = self._items(template, frame.inputs)
        accumulator = _text(frame.inputs.get("accumulator", ""))
        completed: list[TaskOutput] = []
        notes: Mapping[str, object] = {}
        for index, item in enumerate(items):
            base = attrs.evolve(frame, history=())
            inner_inputs = {**frame.inputs, "item": item, "index": str(index + 1)}
            inner = await self._child(
                template, template.inner, attrs.evolve(base, inputs=inner_inputs), index, len(items), completed
            )
            reduce_inputs = {**frame.inputs, "accumulator": accumulator, "current": inner.content}
            reduced = await self._child(
                template, template.reduction, attrs.evolve(base, inputs=reduce_inputs), index, len(items), completed
            )
            accumulator, notes = reduced.content, reduced.notes
            completed.append(TaskOutput(f"item-{index + 1}", reduced.content, reduced.notes, self.clock.now()))
        return TaskResult(accumulator, TaskStatus.COMPLETE, notes)

    @staticmethod
    def _items(template: ReduceTemplate, inputs: Mapping[str, InputValue]) -> tuple[str, ...]:
        if template.over not in inputs:
            raise TaskFailedError(
                TaskFailureReason.INPUT_VALIDATION_FAILURE,
                f"reduce task {template.label!r} runs over input {template.over!r}, which was not given",
            )
        value = inputs[template.over]
        if isinstance(value, str):
            return tuple(line for line in value.splitlines() if line.strip())
        return tuple(value)

    async def _child(
        self,
        parent: SequentialTemplate | ReduceTemplate,
        child: TaskTemplate,
        frame: _Frame,
        index: int,
        total: int,
        completed: list[TaskOutput],
    ) -> TaskResult:
        """Run one step of a sequence or reduce; a failure names the step and keeps what completed."""
        try:
            return await self._evaluate(child, frame)
        except TaskFailedError as exc:
            raise TaskFailedError(
                TaskFailureReason.SUBTASK_FAILURE,
                f"{parent.operator.value} task {parent.label!r} stopped at step {index + 1} of {total}: {exc}",
                result=exc.result,
                failed_step=index + 1,
                total_steps=total,
                partial_results=tuple(completed),
            ) from exc

    async def _script(self, template: ScriptTemplate, frame: _Frame) -> TaskResult:
        if not self.registry.allow_scripts:
            refuse_script(template)
        argv = [substitute(arg, frame.inputs, template.label) for arg in template.command]
        refuse_injected_options(template.command, argv, template.label)
        result = await run_command(
            argv,
            timeout=template.timeout or self.script_timeout,
            label=template.label,
            output_limit=self.script_output_limit,
        )
        frame.trace.add(template.label, result.content)
        return result
