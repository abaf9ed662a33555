"""The tool loop: call the model, run the tools it asks for, until it answers.

Voice and files (docs/adr/0004-voice-and-attachments-as-tool-results.md): the model
asks for a voice message by calling the built-in `send_voice` tool, and a tool that
returns an `Attachment` (or a `VoiceReply`) adds it to the turn's response. The final
text reply is the canonical answer.

Streaming: each model call is streamed, and when the channel can stream (and the turn
is not automatic) its text deltas reach the user as they arrive, in one message per turn
recorded as `StreamedText`; routing later closes that message with the canonical answer
or aborts it before a fallback.

Interruption: under the `interrupt` mid-turn policy, a newer message of the session stops the
turn at its next safe point, before a model call or a tool step (never inside a tool): it ends
INTERRUPTED, and routing withdraws what it streamed.

Budgets: with `ToolLoopSettings.budgets` set, each model call first reserves its estimate on the
usage store's ledger and each tool step first checks no budget is used up (`systems.budgets`); a
budget in the way ends the turn BUDGET_EXCEEDED, as a deadline does.

Approval: a call that needs the user's approval (`@tool(requires_approval=True)`, or the
`approval` hook) is not run; the turn ends AWAITING_APPROVAL with an `ApprovalRequest`,
and the conversation so far is stored as a `PendingApproval`. The turn of the user's
decision (`IncomingMessage.approval`) takes it once, runs the call or tells the model it
was denied, and lets the model continue from there.

A turn run inside a tool (a bot asked as a tool, `agentloop.agents`): each tool runs with this
turn as its `EnclosingTurn` (`systems.nested`), so the inner turn's executions reach this loop's
`on_tool_execution` under this session, its model calls join this turn's `TurnUsage` and budgets,
and a call it holds back for approval ends this turn awaiting the user's decision, which the
tool (its `nested_approval`) gets back, approved or denied.
"""

from __future__ import annotations

import asyncio
import enum
import json
import warnings
from collections.abc import Callable, Iterable
from contextlib import aclosing
from time import perf_counter
from typing import Any, ClassVar, Unpack

import attrs

from agentloop import (
    TELEMETRY,
    AgentContext,
    ApprovalDecision,
    ApprovalRequest,
    Attachment,
    CallUsage,
    ChatMessage,
    FailureKind,
    FailureSource,
    FinishReason,
    InboxTurn,
    LlmCallError,
    LlmFailure,
    LlmReply,
    LlmRequest,
    LlmResponse,
    OutputType,
    OutputValidationError,
    PendingApproval,
    PlanProposal,
    Prices,
    PromptContext,
    SanitizedInput,
    StreamedText,
    StructuredOutput,
    System,
    Tool,
    ToolArgumentError,
    ToolCall,
    ToolExecution,
    ToolExecutions,
    ToolLoopStop,
    TokenCounter,
    ToolRegistry,
    TurnUsage,
    VoiceReply,
    approval_scope,
    collect,
    converter,
    current_execution_id,
    enclosing_turn,
    events_of,
    running_execution,
    tool,
)
from agentloop._containment import passes_through, running_task
from agentloop._log import get_logger
from agentloop._names import new_id
from agentloop._text import cap_bytes, storable
from agentloop.ports import LLM, ApprovalStore, Channel, Metrics, StreamingChannel, UsageStore

from systems.budgets import BudgetGuard

from systems.nested import NestedTurn
from systems.outcome import render_call
from systems.tool_loop_settings import DEFAULT_MAX_TOOL_OUTPUT_BYTES as DEFAULT_MAX_TOOL_OUTPUT_BYTES
from systems.tool_loop_settings import SettingsKeywords
from systems.tool_loop_settings import ToolExecutionHook as ToolExecutionHook
from systems.tool_loop_settings import ToolLoopSettings as ToolLoopSettings
from systems.tool_loop_settings import ToolPolicy as ToolPolicy
from systems.tool_loop_settings import plan_mode_requested as plan_mode_requested
from systems.tool_turn import RanCall, ToolTurn, execution_of
from systems.usage import count_tokens, prompt_cache_key, usage_attributes

_log = get_logger("agentloop.tool_loop")

UNKNOWN_APPROVAL = "that approval was already answered or does not exist"
NO_APPROVALS_FOR_NESTED = "it asked for the user's approval, but this bot keeps no approvals (pass approvals=...)"
NOT_RUN_BEHIND_APPROVAL = "not run: it came after a call that awaits the user's approval; call it again if you still need it"


@tool(name="send_voice")
def send_voice(text: str) -> VoiceReply:
    """Send `text` to the user as a voice message, in addition to your written answer."""
    return VoiceReply(text)


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


class _Structured(enum.Enum):
    """What a reply read as the structured answer means for the loop."""

    FINISHED = "finished"
    """The turn is answered, or failed its repair."""
    REPAIR = "repair"
    """The answer did not fit; the model is asked once more."""
    NOT_AN_ANSWER = "not an answer"
    """The reply asks for other tools; run them."""


class ToolLoopSystem(System):
    """Runs the model/tool exchange for the turn (order 30), within its `settings` (a `ToolLoopSettings`).

    Writes `LlmResponse` (the final answer), or `LlmFailure`, and `ToolLoopStop` when a
    limit, the deadline or the tool policy ended the loop; in plan mode the model's
    tool calls become a `PlanProposal` and none runs. Every tool run is recorded in
    `ToolExecutions` and handed to `on_tool_execution`. A tool exception or a bad
    argument (or arguments that are not a JSON object) is a TOOL failure whose message
    goes back to the model as the result. A tool's output is cut to
    `max_tool_output_bytes` (the cut marked) before the model or capture sees it.
    Each model call is streamed: with a `channel` that can stream, in a user turn, its
    text reaches the user as it is written and `StreamedText` records what was shown;
    each call's token usage is added to `TurnUsage` as it comes (a failed turn's too) and adds up on
    `LlmResponse.usage` and in `metrics`. Requests carry the session's `prompt_cache_key` as
    their `cache_key`, so its turns reach one provider-side prompt cache. With telemetry switched on,
    each model call and each tool call is a span under the system's.
    The async tools one model reply asks for run concurrently; its plain `def` tools run on
    tool threads (`agentloop.tools.tool_threads`), one after another in call order, so a
    blocking one stalls neither the event loop nor the turn deadline; their results reach the
    model, `ToolExecutions` and the failures in call order. Whatever a tool raises (even
    `SystemExit`) is its failure, except `KeyboardInterrupt` and cancellation. A turn
    that an earlier system already answered with an `LlmResponse` (a cache hit, a canned
    reply) is left alone: the model is not asked and no tool runs.
    A call that needs approval (the tool's `requires_approval`, or `approval(ctx, call)` when
    given) ends the turn after the calls before it ran: it is stored in `approvals` (in the
    session's `approval_scope` within `company_id`) and written as the `ApprovalRequest`.
    """

    order: ClassVar[int] = 30
    reads = (PromptContext, SanitizedInput)
    optional_reads = (LlmResponse, InboxTurn)
    writes = (
        LlmResponse, LlmFailure, ToolLoopStop, PlanProposal, ToolExecutions, StreamedText, StructuredOutput, ApprovalRequest,
        TurnUsage,
    )

    def __init__(
        self,
        llm: LLM,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]] = (),
        settings: ToolLoopSettings = ToolLoopSettings(),
        *,
        channel: Channel | None = None,
        metrics: Metrics | None = None,
        approvals: ApprovalStore | None = None,
        usage: UsageStore | None = None,
        prices: Prices | None = None,
        tokens: TokenCounter | None = None,
        **deprecated: Unpack[SettingsKeywords],
    ) -> None:
        if deprecated:
            warnings.warn(
                f"ToolLoopSystem({', '.join(f'{name}=' for name in deprecated)}...) is deprecated and goes in the next "
                "release; pass settings=ToolLoopSettings(...) with the same fields",
                DeprecationWarning,
                stacklevel=2,
            )
            settings = attrs.evolve(settings, **deprecated)
        self.llm = llm
        self.tools = ToolRegistry(tools)  # a copy: adding send_voice must not change the caller's registry
        needing = [t.name for t in self.tools if t.requires_approval]
        if approvals is None and (settings.approval is not None or needing):
            what = "an approval hook" if settings.approval is not None else f"the tool(s) {', '.join(map(repr, needing))} need approval"
            raise ValueError(
                f"{what}, so the tool loop needs approvals=... (an ApprovalStore, such as stores.approvals) "
                "to keep the calls awaiting it"
            )
        if settings.voice and self.tools.get(send_voice.name) is None:
            self.tools.add(send_voice)
        self.usage, self.prices, self.tokens = usage, prices or Prices(), tokens
        self.retired_budgets: list[BudgetGuard] = []  # guards of replaced settings, until their leases are given back
        self.settings = settings
        self.channel = channel
        self._stream_to = channel if isinstance(channel, StreamingChannel) else None
        self.metrics = metrics
        self.approvals = approvals

    @property
    def settings(self) -> ToolLoopSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: ToolLoopSettings) -> None:
        """New settings (a hook chained on, say); the answer's type is read once, here."""
        self._settings = settings
        self.output: OutputType[Any] | None = OutputType(settings.output_type) if settings.output_type is not None else None
        kept = getattr(self, "budget", None)
        if kept is not None and (kept.budgets, kept.company_id) == (settings.budgets, settings.company_id):
            return  # the same budgets (a hook chained on): the guard keeps its leases
        if kept is not None:
            self.retired_budgets.append(kept)  # its leases are given back with the others' (`release_budgets`)
        self.budget = (
            BudgetGuard(settings.budgets, self.usage, prices=self.prices, company_id=settings.company_id, tokens=self.tokens)
            if settings.budgets.configured else None
        )

    def should_process(self, ctx: AgentContext) -> bool:
        return not ctx.has(LlmResponse)

    def _in_plan_mode(self, ctx: AgentContext) -> bool:
        return self.settings.plan_mode(ctx) if callable(self.settings.plan_mode) else self.settings.plan_mode

    async def process(self, ctx: AgentContext) -> None:
        quiet = ctx.auto_mode or self.output is not None  # a structured answer is JSON, not text to show
        turn = ToolTurn(ctx, ctx.require(PromptContext), self.name, None if quiet else self._stream_to)
        schema = self.output.schema if self.output is not None else None
        plan_mode = self._in_plan_mode(ctx)
        specs = self.tools.specs
        cache_key = prompt_cache_key(ctx, self.settings.company_id)
        if ctx.incoming.decision is not None and (await self._over_budget(turn) or not await self._resume(turn, ctx.incoming.decision)):
            return  # over budget, the approval stays pending: the user may decide again later
        while True:
            if ctx.deadline_passed():
                turn.stop(FinishReason.DEADLINE, "the turn deadline passed before the model finished")
                return
            if await self._interrupted(turn):
                return
            if turn.llm_calls >= self.settings.max_llm_calls:
                turn.stop(FinishReason.ITERATION_LIMIT, f"the model was called {turn.llm_calls} times without finishing")
                return
            request = LlmRequest(
                tuple(turn.messages), specs, self.settings.model, self.settings.temperature, time_left=ctx.time_left(),
                response_schema=schema, cache_key=cache_key,
            )
            try:
                reply = await self._budgeted_call(turn, request)
                if reply is None:
                    return
            except LlmCallError as exc:
                self._llm_failed(turn, exc.kind, str(exc))
                return
            except Exception as exc:
                self._llm_failed(turn, FailureKind.EXCEPTION, f"{type(exc).__name__}: {exc}")
                return
            content = storable(reply.content) if reply.content is not None else None
            if self.output is not None:
                read = self._structured(turn, self.output, reply, content)
                if read is _Structured.FINISHED:
                    return
                if read is _Structured.REPAIR:
                    continue
            if not reply.tool_calls:
                self._answer(turn, content or "", reply.model)
                return
            if plan_mode:
                ctx.set(PlanProposal(content, reply.tool_calls))
                turn.stop(FinishReason.PLAN_MODE, f"plan mode: {len(reply.tool_calls)} tool call(s) proposed, none run")
                return
            if not await self._tool_step(turn, content, reply.tool_calls):
                return

    async def _tool_step(self, turn: ToolTurn, content: str | None, calls: tuple[ToolCall, ...]) -> bool:
        """Run the tool calls of one model reply; False when the turn ends after them."""
        turn.messages.append(ChatMessage.assistant(content, calls))
        if await self._interrupted(turn) or await self._over_budget(turn):
            return False
        admitted, stop = self._admit(turn, calls)
        self._told(turn, await self._run_step(turn, admitted))
        if turn.nested is not None:
            await self._suspend_nested(turn, calls)
            return False
        if turn.awaiting is not None:
            await self._suspend(turn, turn.awaiting, calls)
        if stop is not None:
            turn.stop(*stop)
            return False
        return True

    def _told(self, turn: ToolTurn, runs: Iterable[RanCall]) -> None:
        """Put the step's runs on the turn and tell the model their results, but for a call a turn
        run inside it holds back for approval: its result comes with the user's decision."""
        for ran in runs:
            told = self._record(turn, ran)
            held = turn.nested is not None and ran.call.id == turn.nested.call.id
            if held and self.approvals is None:
                told = f"error: {NO_APPROVALS_FOR_NESTED}"
                turn.fail(FailureSource.TOOL, ran.call.name, FailureKind.POLICY, f"tool {ran.call.name!r}: {NO_APPROVALS_FOR_NESTED}")
                turn.nested, held = None, False
            if not held:
                turn.messages.append(ChatMessage.tool(ran.call.id, ran.call.name, told))

    @staticmethod
    async def _interrupted(turn: ToolTurn) -> bool:
        """The safe point before a model call or a tool step: a newer message of the session stops the turn here."""
        if not await turn.ctx.interrupted():
            return False
        turn.stop(FinishReason.INTERRUPTED, "a newer message of this session arrived")
        return True

    async def _over_budget(self, turn: ToolTurn) -> bool:
        """Before a tool step: a budget used up stops the turn here."""
        refusal = None if self.budget is None else await self.budget.before_tools(turn.ctx, turn.usage.total)
        if refusal is not None:
            turn.stop(FinishReason.BUDGET_EXCEEDED, refusal)
        return refusal is not None

    async def _budgeted_call(self, turn: ToolTurn, request: LlmRequest) -> LlmReply | None:
        """`_call` with its budget reservation made before and settled after; None when a budget stops the turn instead."""

        async def call() -> LlmReply:
            turn.llm_calls += 1
            return await self._call(turn, request)

        reply = await (call() if self.budget is None else self.budget.guarded(turn.ctx, turn.usage.total, request, self._asked(), call))
        if isinstance(reply, str):
            turn.stop(FinishReason.BUDGET_EXCEEDED, reply)
            return None
        return reply

    def _asked(self) -> str | None:
        """The model the loop asks for: the settings' or the adapter's."""
        asked = self.settings.model or getattr(self.llm, "model", None)
        return asked if isinstance(asked, str) else None

    def _admit(self, turn: ToolTurn, calls: Iterable[ToolCall]) -> tuple[list[ToolCall], tuple[FinishReason, str] | None]:
        """The calls of one model step that may run, in order, and why the loop stops after them, if it does
        (the tool limit, the policy denying a call, or a call awaiting approval: the calls before it still run)."""
        admitted: list[ToolCall] = []
        for call in calls:
            if len(turn.executions) + len(admitted) >= self.settings.max_tool_executions:
                return admitted, (FinishReason.ITERATION_LIMIT, f"the tool limit ({self.settings.max_tool_executions}) was reached")
            denial = self.settings.policy(turn.ctx, call) if self.settings.policy is not None else None
            if denial is not None:
                turn.fail(FailureSource.TOOL, call.name, FailureKind.POLICY, f"tool {call.name!r} denied: {denial}")
                return admitted, (FinishReason.POLICY_DENIED, denial)
            if self._needs_approval(turn.ctx, call):
                turn.awaiting = call
                return admitted, (FinishReason.AWAITING_APPROVAL, render_call(call.name, call.arguments))
            admitted.append(call)
        return admitted, None

    def _needs_approval(self, ctx: AgentContext, call: ToolCall) -> bool:
        """Whether `call` waits for the user's approval: the hook decides when there is one, else the tool's flag."""
        if self.settings.approval is not None:
            return self.settings.approval(ctx, call)
        found = self.tools.get(call.name)
        return found is not None and found.requires_approval

    async def _suspend(self, turn: ToolTurn, call: ToolCall, step: Iterable[ToolCall], shown: ApprovalRequest | None = None) -> None:
        """Store `call` as awaiting approval, with the conversation so far (the step's calls not run
        answered as such), and put its `ApprovalRequest` on the turn: `shown`, the call a turn run
        inside `call` holds back, when there is one, under its id, a dot and the tool's name (an id a URL path holds; `_resume` takes the name off)."""
        assert self.approvals is not None  # __init__ refuses approval without a store, _told a nested one
        ctx = turn.ctx
        answered = {m.tool_call_id for m in turn.messages}
        later = [c for c in step if c.id != call.id and c.id not in answered]
        messages = (*turn.messages, *(ChatMessage.tool(c.id, c.name, NOT_RUN_BEHIND_APPROVAL) for c in later))
        approval_id = new_id() if shown is None else f"{shown.approval_id}.{call.name}"
        request = ApprovalRequest(approval_id, call.name, dict(call.arguments), ctx.session.id, ctx.turn_id, ctx.clock.now())
        await self.approvals.add(PendingApproval(request, approval_scope(ctx.session, self.settings.company_id), call.id, messages))
        ctx.set(request if shown is None else attrs.evolve(shown, approval_id=approval_id, session_id=ctx.session.id, turn_id=ctx.turn_id))

    async def _suspend_nested(self, turn: ToolTurn, step: Iterable[ToolCall]) -> None:
        """End the turn awaiting the user's decision on the call a turn run inside one of its tools holds back."""
        assert turn.nested is not None
        request = turn.nested.request
        await self._suspend(turn, turn.nested.call, step, request)
        turn.stop(FinishReason.AWAITING_APPROVAL, render_call(request.tool, request.arguments))

    async def _resume(self, turn: ToolTurn, decision: ApprovalDecision) -> bool:
        """Take the decided call (once) and continue its conversation: the call's result when approved,
        the denial (with the user's note) when not. False when there is nothing to take: the turn ends."""
        taken = None
        if self.approvals is not None:
            scope = approval_scope(turn.ctx.session, self.settings.company_id)
            # keyed by the turn: a worker running the decision's message again after a crash gets it back
            taken = await self.approvals.take(scope, decision.approval_id, decision.approved, key=turn.ctx.turn_id)
        if taken is None:
            message = f"approval {decision.approval_id!r}: {UNKNOWN_APPROVAL}"
            turn.fail(FailureSource.SYSTEM, self.name, FailureKind.VALIDATION, message)
            turn.stop(FinishReason.ERROR, UNKNOWN_APPROVAL)
            return False
        turn.messages = list(taken.messages)
        call = taken.call
        found = self.tools.get(call.name)
        # only a call held back inside the tool has an id ending ".<tool>"; the tool's own approval is decided here
        nested = found is not None and found.nested_approval and decision.approval_id.endswith(f".{call.name}")
        if decision.approved or nested:
            turn.resumes = attrs.evolve(decision, approval_id=decision.approval_id.removesuffix(f".{call.name}")) if nested else None
            try:
                runs = await self._run_step(turn, [call])
            finally:
                turn.resumes = None
            self._told(turn, runs)
            if turn.nested is not None:  # the turn inside it holds back another call
                await self._suspend_nested(turn, [call])
                return False
            return True
        result = "the user denied this call" + (f": {decision.note}" if decision.note else "")
        turn.messages.append(ChatMessage.tool(call.id, call.name, result))
        return True

    async def _run_step(self, turn: ToolTurn, calls: list[ToolCall]) -> list[RanCall]:
        """Run one model step's calls: async tools concurrently, sync tools on tool threads one after
        another in call order; the runs come back in call order. A lone call runs in the system's
        own task: a task of its own would cost more than a trivial tool."""
        step_id = new_id()  # the calls of one model step share it
        if len(calls) == 1:
            return [await self._traced(turn, calls[0], step_id, None)]
        tasks: list[asyncio.Task[RanCall]] = []
        serial = asyncio.Lock()  # sync tools take it in task order, which is call order
        try:
            async with asyncio.TaskGroup() as group:
                tasks.extend(group.create_task(self._traced(turn, call, step_id, serial)) for call in calls)
        except BaseException:  # cut short (the turn deadline): the runs that did finish stay on the turn
            for ran in [task.result() for task in tasks if task.done() and not task.cancelled() and task.exception() is None]:
                turn.messages.append(ChatMessage.tool(ran.call.id, ran.call.name, self._record(turn, ran)))
            raise
        return [task.result() for task in tasks]

    async def _traced(self, turn: ToolTurn, call: ToolCall, step_id: str, serial: asyncio.Lock | None) -> RanCall:
        """`_execute` in a span of its own, a child of the tool loop's, saying whether the tool failed."""
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name}
        with TELEMETRY.span(f"execute_tool {call.name}", attributes) as span:
            ran = await self._execute(turn, call, step_id, serial)
            if span is not None:
                span.set_attribute("agentloop.outcome", "ok" if ran.failure is None else "error")
                if ran.failure is not None:
                    span.fail(ran.failure[1])
        return ran

    def _record(self, turn: ToolTurn, ran: RanCall) -> str:
        """Put a finished run on the turn (its failure, voice, attachment, execution); what the model is told."""
        if ran.failure is not None:
            turn.fail(FailureSource.TOOL, ran.call.name, *ran.failure)
        if isinstance(ran.result, VoiceReply):
            turn.voice_text = ran.result.text
        elif isinstance(ran.result, Attachment):
            turn.attachments.append(ran.result)
        turn.executions.append(ran.execution)
        turn.ctx.set(ToolExecutions(tuple(turn.executions)))
        error, result = ran.execution.error, ran.execution.result
        return f"error: {error}" if error is not None else result or ""

    async def _call(self, turn: ToolTurn, request: LlmRequest) -> LlmReply:
        """Ask the model, streaming its text to the user as it comes; its reply once it finished."""
        asked = self._asked()
        attributes = {"gen_ai.operation.name": "chat"} | ({"gen_ai.request.model": asked} if asked else {})
        with TELEMETRY.span(f"chat {asked}" if asked else "chat", attributes) as span:
            t0 = perf_counter()
            if callable(getattr(self.llm, "stream", None)):
                async with aclosing(events_of(self.llm, request)) as events:
                    reply = await collect(events, turn.show, turn.switched)
            else:  # what collecting its one-delta stream (`events_of`) comes to, without the generator
                reply = await self.llm.complete(request)
                await turn.show(reply.content or "")
            if span is not None:
                span.set_attribute("agentloop.llm.latency_ms", (perf_counter() - t0) * 1000.0)
                if reply.model:
                    span.set_attribute("gen_ai.response.model", reply.model)
                if reply.usage is not None:
                    for key, value in usage_attributes(reply.usage).items():
                        span.set_attribute(key, value)
        turn.record(complete=True)
        if reply.usage is not None:
            model = reply.model or asked
            turn.add_usage(CallUsage(model, reply.usage))
            metrics = TELEMETRY.metrics_for(self.metrics)
            if metrics is not None:
                count_tokens(metrics, reply.usage, model or "unknown", asked)
        return reply

    def _structured(self, turn: ToolTurn, output: OutputType[Any], reply: LlmReply, content: str | None) -> _Structured:
        """Take the reply as the structured answer, and say what the loop does next."""
        calls = [c for c in reply.tool_calls if c.name == output.schema.name]
        if reply.tool_calls and not calls:
            return _Structured.NOT_AN_ANSWER
        call = calls[0] if calls else None
        answer: str | dict[str, Any] = content or ""
        if call is not None:  # unreadable arguments are checked as the text they came as, so the model is told why
            answer = call.arguments_text or "" if call.arguments_error is not None else dict(call.arguments)
        try:
            value = output.parse(answer)
        except OutputValidationError as exc:
            if turn.repaired:
                self._llm_failed(turn, FailureKind.VALIDATION, str(exc))
                return _Structured.FINISHED
            turn.repaired = True
            told = f"{exc}. Answer again, fitting the schema."
            if call is None:
                turn.messages += [ChatMessage.assistant(content), ChatMessage.user(told)]
            else:
                turn.messages += [ChatMessage.assistant(content, (call,)), ChatMessage.tool(call.id, call.name, f"error: {told}")]
            return _Structured.REPAIR
        turn.ctx.set(StructuredOutput(value))
        self._answer(turn, storable(output.text_of(answer)), reply.model)
        return _Structured.FINISHED

    def _llm_failed(self, turn: ToolTurn, kind: FailureKind, message: str) -> None:
        turn.fail(FailureSource.LLM, self.name, kind, message)
        turn.ctx.set(LlmFailure(kind, message, self.settings.model))

    def _answer(self, turn: ToolTurn, text: str, model: str | None) -> None:
        if not (text.strip() or turn.voice_text or turn.attachments):
            turn.fail(FailureSource.LLM, self.name, FailureKind.VALIDATION, "the model returned an empty reply")
            return
        usage = turn.usage.total if turn.usage.calls else None
        turn.ctx.set(LlmResponse(text, model or self.settings.model, turn.voice_text, tuple(turn.attachments), usage))

    async def _execute(self, turn: ToolTurn, call: ToolCall, step_id: str, serial: asyncio.Lock | None) -> RanCall:
        """Run one tool call of model step `step_id`, a sync tool holding `serial` (if given) while it
        runs; the turn records it later, in call order."""
        ctx = turn.ctx
        started_at = ctx.clock.now()
        t0 = perf_counter()
        execution_id = new_id()
        parent_id, outer = current_execution_id(), enclosing_turn()
        found = self.tools.get(call.name)
        result: Any = None
        result_text: str | None = None
        error: str | None = None
        failure: tuple[FailureKind, str] | None = None
        if found is None:
            error = f"there is no tool named {call.name!r}; available: {', '.join(t.name for t in self.tools)}"
            failure = (FailureKind.VALIDATION, error)
        elif call.arguments_error is not None:
            error = f"the arguments of {call.name!r} could not be read: {call.arguments_error}; send a JSON object"
            failure = (FailureKind.VALIDATION, error)
        else:
            task = running_task()
            try:
                nested = NestedTurn(turn, call, lambda: self.settings.on_tool_execution, self.budget, outer, turn.resumes)
                with running_execution(execution_id, nested):
                    if serial is None or not found.runs_on_thread:
                        result = await found.invoke(call.arguments)
                    else:
                        async with serial:
                            result = await found.invoke(call.arguments)
                rendered = _render_result(result)  # a result JSON cannot hold fails here, as the tool's failure
            except ToolArgumentError as exc:
                error = str(exc)
                failure = (FailureKind.VALIDATION, error)
            except BaseException as exc:  # SystemExit from argparse on the model's arguments too: the tool's failure
                if passes_through(exc, task):
                    raise
                error = f"{type(exc).__name__}: {exc}"
                failure = (FailureKind.EXCEPTION, error)
                _log.warning("tool.failed", tool=call.name, turn_id=ctx.turn_id, exc_info=exc)
            else:
                result_text = storable(cap_bytes(rendered, self.settings.max_tool_output_bytes))
        if error is not None:
            error = storable(cap_bytes(error, self.settings.max_tool_output_bytes))
        execution = execution_of(ctx, call, step_id, execution_id, parent_id, started_at, (perf_counter() - t0) * 1000.0, result_text, error)
        if outer is not None:  # a turn run inside a tool: its executions join the enclosing turn's trajectory
            outer.capture(execution)
        if self.settings.on_tool_execution is not None:
            try:
                self.settings.on_tool_execution(execution)
            except Exception as exc:
                _log.error("tool.hook_failed", tool=call.name, turn_id=ctx.turn_id, exc_info=exc)
        return RanCall(call, execution, result, failure)

