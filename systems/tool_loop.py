"""The tool loop: call the model, run the tools it asks for, until it answers.

Voice and files (docs/adr/0004-voice-and-attachments-as-tool-results.md): the model
asks for a voice message by calling the built-in `send_voice` tool, and a tool that
returns an `Attachment` (or a `VoiceReply`) adds it to the turn's response. The final
text reply is the canonical answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any, ClassVar

import structlog

from agentloop import (
    AgentContext,
    Attachment,
    ChatMessage,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    LlmCallError,
    LlmError,
    LlmRequest,
    LlmResponse,
    PlanProposal,
    PromptContext,
    SanitizedInput,
    System,
    Tool,
    ToolArgumentError,
    ToolCall,
    ToolExecution,
    ToolExecutions,
    ToolLoopStop,
    ToolRegistry,
    VoiceReply,
    cap_bytes,
    converter,
    current_execution_id,
    running_execution,
    storable,
    tool,
)
from agentloop.ports import LLM

from systems.input import turn_user_text

ToolPolicy = Callable[[AgentContext, ToolCall], "str | None"]
"""Returns why `call` is denied for this turn, or None to allow it."""
ToolExecutionHook = Callable[[ToolExecution], None]
"""Called synchronously right after each tool finishes; must not block."""

_log = structlog.get_logger("agentloop.tool_loop")

DEFAULT_MAX_TOOL_OUTPUT_BYTES = 64 * 1024


@tool(name="send_voice")
def send_voice(text: str) -> VoiceReply:
    """Send `text` to the user as a voice message, in addition to your written answer."""
    return VoiceReply(text)


def plan_mode_requested(ctx: AgentContext) -> bool:
    """The default plan-mode switch: the message's metadata has `plan_mode="true"`."""
    return ctx.incoming.metadata.get("plan_mode") == "true"


def _render_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, VoiceReply):
        return "the voice message will be sent with your answer"
    if isinstance(result, Attachment):
        return f"the file {result.name} will be attached to your answer"
    if result is None:
        return "done"
    return json.dumps(converter.unstructure(result), default=str)


class _Turn:
    """The mutable state of one run of the tool loop."""

    def __init__(self, ctx: AgentContext, prompt: PromptContext) -> None:
        self.ctx = ctx
        self.messages: list[ChatMessage] = list(prompt.to_messages())
        self.llm_calls = 0
        self.executions: list[ToolExecution] = []
        self.voice_text: str | None = None
        self.attachments: list[Attachment] = []

    def fail(self, source: FailureSource, component: str, kind: FailureKind, message: str) -> None:
        self.ctx.add_failure(FailureEvent(source, component, kind, message, self.ctx.clock.now()))

    def stop(self, reason: FinishReason, detail: str) -> None:
        self.ctx.set(ToolLoopStop(reason, detail, self.llm_calls, len(self.executions)))


class ToolLoopSystem(System):
    """Runs the model/tool exchange for the turn (order 30).

    Writes `LlmResponse` (the final answer), or `LlmError`, and `ToolLoopStop` when a
    limit, the deadline or the tool policy ended the loop; in plan mode the model's
    tool calls become a `PlanProposal` and none runs. Every tool run is recorded in
    `ToolExecutions` and handed to `on_tool_execution`. A tool exception or a bad
    argument (or arguments that are not a JSON object) is a TOOL failure whose message
    goes back to the model as the result. A tool's output is cut to
    `max_tool_output_bytes` (the cut marked) before the model or capture sees it.
    Sync tools run on the event loop: make slow or blocking tools `async def`. A turn
    that an earlier system already answered with an `LlmResponse` (a cache hit, a canned
    reply) is left alone: the model is not asked and no tool runs.
    """

    order: ClassVar[int] = 30
    reads = (PromptContext, SanitizedInput)
    optional_reads = (LlmResponse,)
    writes = (LlmResponse, LlmError, ToolLoopStop, PlanProposal, ToolExecutions)

    def __init__(
        self,
        llm: LLM,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]] = (),
        *,
        max_llm_calls: int = 8,
        max_tool_executions: int = 16,
        plan_mode: bool | Callable[[AgentContext], bool] = plan_mode_requested,
        policy: ToolPolicy | None = None,
        on_tool_execution: ToolExecutionHook | None = None,
        voice: bool = True,
        model: str | None = None,
        temperature: float | None = None,
        max_tool_output_bytes: int = DEFAULT_MAX_TOOL_OUTPUT_BYTES,
    ) -> None:
        if max_llm_calls < 1 or max_tool_executions < 0:
            raise ValueError("max_llm_calls must be at least 1 and max_tool_executions not negative")
        if max_tool_output_bytes < 1:
            raise ValueError(f"max_tool_output_bytes must be positive, got {max_tool_output_bytes}")
        self.llm = llm
        self.tools = ToolRegistry(tools)  # a copy: adding send_voice must not change the caller's registry
        if voice and self.tools.get(send_voice.name) is None:
            self.tools.add(send_voice)
        self.max_llm_calls = max_llm_calls
        self.max_tool_executions = max_tool_executions
        self.plan_mode = plan_mode
        self.policy = policy
        self.on_tool_execution = on_tool_execution
        self.model = model
        self.temperature = temperature
        self.max_tool_output_bytes = max_tool_output_bytes

    def should_process(self, ctx: AgentContext) -> bool:
        return not ctx.has(LlmResponse)

    def _in_plan_mode(self, ctx: AgentContext) -> bool:
        return self.plan_mode(ctx) if callable(self.plan_mode) else self.plan_mode

    async def process(self, ctx: AgentContext) -> None:
        turn = _Turn(ctx, ctx.require(PromptContext))
        plan_mode = self._in_plan_mode(ctx)
        specs = self.tools.specs
        while True:
            if ctx.deadline_passed():
                turn.stop(FinishReason.DEADLINE, "the turn deadline passed before the model finished")
                return
            if turn.llm_calls >= self.max_llm_calls:
                turn.stop(FinishReason.ITERATION_LIMIT, f"the model was called {turn.llm_calls} times without finishing")
                return
            turn.llm_calls += 1
            request = LlmRequest(tuple(turn.messages), specs, self.model, self.temperature, time_left=ctx.time_left())
            try:
                reply = await self.llm.complete(request)
            except LlmCallError as exc:
                self._llm_failed(turn, exc.kind, str(exc))
                return
            except Exception as exc:
                self._llm_failed(turn, FailureKind.EXCEPTION, f"{type(exc).__name__}: {exc}")
                return
            content = storable(reply.content) if reply.content is not None else None
            if not reply.tool_calls:
                self._answer(turn, content or "", reply.model)
                return
            if plan_mode:
                ctx.set(PlanProposal(content, reply.tool_calls))
                turn.stop(FinishReason.PLAN_MODE, f"plan mode: {len(reply.tool_calls)} tool call(s) proposed, none run")
                return
            turn.messages.append(ChatMessage.assistant(content, reply.tool_calls))
            step_id = uuid.uuid4().hex  # the calls of one model step share it
            for call in reply.tool_calls:
                if len(turn.executions) >= self.max_tool_executions:
                    turn.stop(FinishReason.ITERATION_LIMIT, f"the tool limit ({self.max_tool_executions}) was reached")
                    return
                denial = self.policy(ctx, call) if self.policy is not None else None
                if denial is not None:
                    turn.fail(FailureSource.TOOL, call.name, FailureKind.POLICY, f"tool {call.name!r} denied: {denial}")
                    turn.stop(FinishReason.POLICY_DENIED, denial)
                    return
                told = await self._execute(turn, call, step_id)
                turn.messages.append(ChatMessage.tool(call.id, call.name, told))

    def _llm_failed(self, turn: _Turn, kind: FailureKind, message: str) -> None:
        turn.fail(FailureSource.LLM, self.name, kind, message)
        turn.ctx.set(LlmError(kind, message, self.model))

    def _answer(self, turn: _Turn, text: str, model: str | None) -> None:
        if not (text.strip() or turn.voice_text or turn.attachments):
            turn.fail(FailureSource.LLM, self.name, FailureKind.VALIDATION, "the model returned an empty reply")
            return
        turn.ctx.set(LlmResponse(text, model or self.model, turn.voice_text, tuple(turn.attachments)))

    async def _execute(self, turn: _Turn, call: ToolCall, step_id: str) -> str:
        """Run one tool call of model step `step_id`; returns what the model is told about it."""
        ctx = turn.ctx
        started_at = ctx.clock.now()
        t0 = perf_counter()
        execution_id = uuid.uuid4().hex
        parent_id = current_execution_id()
        found = self.tools.get(call.name)
        result_text: str | None = None
        error: str | None = None
        if found is None:
            error = f"there is no tool named {call.name!r}; available: {', '.join(t.name for t in self.tools)}"
            turn.fail(FailureSource.TOOL, call.name, FailureKind.VALIDATION, error)
        elif call.arguments_error is not None:
            error = f"the arguments of {call.name!r} could not be read: {call.arguments_error}; send a JSON object"
            turn.fail(FailureSource.TOOL, call.name, FailureKind.VALIDATION, error)
        else:
            try:
                with running_execution(execution_id):
                    result = await found.invoke(call.arguments)
            except ToolArgumentError as exc:
                error = str(exc)
                turn.fail(FailureSource.TOOL, call.name, FailureKind.VALIDATION, error)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                turn.fail(FailureSource.TOOL, call.name, FailureKind.EXCEPTION, error)
                _log.warning("tool.failed", tool=call.name, turn_id=ctx.turn_id, exc_info=exc)
            else:
                if isinstance(result, VoiceReply):
                    turn.voice_text = result.text
                elif isinstance(result, Attachment):
                    turn.attachments.append(result)
                result_text = storable(cap_bytes(_render_result(result), self.max_tool_output_bytes))
        if error is not None:
            error = storable(cap_bytes(error, self.max_tool_output_bytes))
        session = ctx.session
        execution = ToolExecution(
            id=execution_id,
            tool_name=storable(call.name),
            arguments=dict(call.arguments),
            started_at=started_at,
            duration_ms=(perf_counter() - t0) * 1000.0,
            session_id=session.id,
            result=result_text,
            error=error,
            parent_id=parent_id,
            user_id=session.user_id,
            project_id=session.project_id,
            context_snapshot={
                "turn_id": ctx.turn_id,
                "user_message": turn_user_text(ctx)[:500],
            },
            org_id=session.org_id,
            team_id=session.team_id,
            step_id=step_id,
        )
        turn.executions.append(execution)
        ctx.set(ToolExecutions(tuple(turn.executions)))
        if self.on_tool_execution is not None:
            try:
                self.on_tool_execution(execution)
            except Exception as exc:
                _log.error("tool.hook_failed", tool=call.name, turn_id=ctx.turn_id, exc_info=exc)
        return f"error: {error}" if error is not None else result_text or ""
