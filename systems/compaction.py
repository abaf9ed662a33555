"""Compaction: once the answer is out, fold the older turns of a session that no longer fit its
history's room into the session's stored summary, so the next turn's prompt stays in budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from agentloop import (
    DEFAULT_COMPANY,
    AgentContext,
    ChatMessage,
    LlmCallError,
    LlmReply,
    LlmRequest,
    LlmResponse,
    Prices,
    PromptContext,
    SanitizedInput,
    System,
    ToolExecutions,
    ToolSpec,
    TurnOutcome,
    TurnPolicy,
    TurnUsage,
    Usage,
    history_scope,
)
from agentloop._log import get_logger
from agentloop.compaction import ContextBudget, UnsummarisedHistory, chunks, fitting_tail, summary_request
from agentloop.ports import LLM, RecordedCall, SessionStore, SessionSummary, SummaryStore, UsageRecord, UsageStore
from agentloop.tokens import (
    MESSAGE_OVERHEAD,
    EstimatedTokens,
    LearningCounter,
    TokenCounter,
    message_tokens,
    prompt_tokens,
    texts_tokens,
    tool_texts,
)

from systems.budgets import BudgetGuard
from systems.input import turn_user_text
from systems.memory import exchange_messages

_log = get_logger("agentloop.compaction")


class CompactionSystem(System):
    """Keeps each session's unsummarised history within the room `budget` leaves it (order 74); a
    function given for `budget` is asked once, at the first turn.

    After the turn is answered and its history written, the messages after the session's
    summary are measured; when they outgrow the room (or `history_window` messages), the
    older whole turns are summarised by `summariser` (the bot's model, or a cheaper one,
    `summary_model`) together with the previous summary, and stored as the next version. The newest
    turns within `budget.keep` of the room stay as they are. A counter that learns
    (`EstimatedTokens`) is corrected here from the usage the model reported for a turn's
    one call. A summariser that fails leaves the summary as it was: the next turn tries again.
    When `ContextBuildingSystem` read the whole history after the summary this turn
    (`UnsummarisedHistory`, counted by the same counter), that with the turn's exchange is
    what is measured, and a turn whose history still fits reads no store at all.

    Each summariser call is a model call like the turn's: with `budget_guard` (a guard, or a function
    giving the current one, such as the tool loop's, so budgets applied after the build count) it first reserves its
    estimate on the budgets (counting this turn's calls towards a per-turn limit) and settles after; a
    budget in the way skips compaction this turn (one log line; the answer already went out). With
    `usage` its calls are stored, priced by `prices`, under the turn id followed by `:compaction`.
    """

    order: ClassVar[int] = 74
    reads = ()
    optional_reads = (
        TurnPolicy, TurnOutcome, PromptContext, LlmResponse, ToolExecutions, UnsummarisedHistory, SanitizedInput, TurnUsage,
    )
    writes = ()

    def __init__(
        self,
        summariser: LLM,
        *,
        sessions: SessionStore,
        summaries: SummaryStore,
        system_prompt: str = "",
        budget: ContextBudget | Callable[[], ContextBudget] = ContextBudget(),
        counter: TokenCounter | None = None,
        history_window: int = 20,
        tools: Sequence[ToolSpec] = (),
        model: str | None = None,
        summary_model: str | None = None,
        read_limit: int = 2000,
        company_id: str = DEFAULT_COMPANY,
        usage: UsageStore | None = None,
        prices: Prices | None = None,
        budget_guard: BudgetGuard | Callable[[], BudgetGuard | None] | None = None,
    ) -> None:
        self.summariser = summariser
        self.sessions = sessions
        self.summaries = summaries
        self.system_prompt = system_prompt
        self._budget = budget
        self.counter = counter or EstimatedTokens()
        self._learner = self.counter if isinstance(self.counter, LearningCounter) else None
        self.history_window = history_window
        self.tools = tuple(tools)
        self._tool_texts = tool_texts(self.tools)
        self.model = model
        self.summary_model = summary_model or model
        self.read_limit = read_limit
        self.company_id = company_id
        self.usage = usage
        self.prices = prices or Prices()
        self.budget_guard = budget_guard

    def should_process(self, ctx: AgentContext) -> bool:
        """A turn that answered: a fallback adds no exchange worth folding (and may have met an outage)."""
        outcome = ctx.turn_outcome
        return outcome is not None and not outcome.fallback and TurnPolicy.of(ctx).persist

    @property
    def budget(self) -> ContextBudget:
        """The token budget; a function given for it is asked on first use (after a start-up check read the window)."""
        if not isinstance(self._budget, ContextBudget):
            self._budget = self._budget()
        return self._budget

    @property
    def guard(self) -> BudgetGuard | None:
        """The guard the summariser's calls reserve on now: `budget_guard`, or what it gives when it is a function."""
        source = self.budget_guard
        return source if source is None or isinstance(source, BudgetGuard) else source()

    @property
    def room(self) -> int:
        """The tokens history may always take (`ContextBudget.history_floor`)."""
        fixed = self.counter.count(self.system_prompt, self.model) + texts_tokens(self.counter, self._tool_texts, self.model)
        return self.budget.history_floor(fixed)

    async def process(self, ctx: AgentContext) -> None:
        self.learn(ctx)
        if self.fits_as_read(ctx):
            return
        scope = history_scope(ctx.session, self.company_id)
        latest = await self.summaries.latest(scope)
        covered = latest.covered if latest is not None else 0
        total = await self.sessions.count(scope)
        pending = await self.sessions.recent(scope, min(total - covered, self.read_limit)) if total > covered else ()
        room, limit = self.room, self.history_window
        if len(pending) <= limit and sum(message_tokens(self.counter, m, self.model) for m in pending) <= room:
            return
        keep = fitting_tail(self.counter, pending, int(room * self.budget.keep), limit=limit // 2, model=self.model)
        folded = pending[:keep]
        if not folded:
            return
        text, done = await self._summarise(ctx, latest.text if latest is not None else None, folded)
        if not done:
            return
        summary = SessionSummary(
            scope, (latest.version if latest else 0) + 1, total - len(pending) + keep, text or "", ctx.clock.now()
        )
        if not await self.summaries.add(summary):
            _log.info("compaction.lost_race", session_id=ctx.session.id, version=summary.version)
            return
        _log.info("compaction.stored", session_id=ctx.session.id, version=summary.version, covered=summary.covered,
                  folded=len(folded))

    async def _summarise(self, ctx: AgentContext, text: str | None, folded: Sequence[ChatMessage]) -> tuple[str | None, bool]:
        """The summary of `text` and `folded`, and whether it was made: a failing summariser or a
        budget in the way leaves it unmade. The calls made are recorded either way."""
        calls: list[RecordedCall] = []
        try:
            for run in chunks(self.counter, folded, self._summariser_room(), self.model):
                request = summary_request(text, run, max_tokens=self.budget.share(self.budget.summary), model=self.summary_model)
                reply = await self._call(ctx, request, calls)
                if reply is None:
                    return text, False
                text = (reply.content or "").strip() or text
        except LlmCallError as error:
            _log.warning("compaction.failed", session_id=ctx.session.id, error=str(error))
            return text, False
        finally:
            if calls and self.usage is not None:
                scope = history_scope(ctx.session, self.company_id)
                await self.usage.record(UsageRecord(f"{ctx.turn_id}:compaction", scope, ctx.clock.now(), tuple(calls)))
        return text, True

    async def _call(self, ctx: AgentContext, request: LlmRequest, calls: list[RecordedCall]) -> LlmReply | None:
        """One summariser call, reserved on the budgets before and settled after, added to `calls`;
        None when a budget stops it."""
        asked = self.summary_model or getattr(self.summariser, "model", None)
        asked = asked if isinstance(asked, str) else None
        guard = self.guard
        if guard is None:
            reply: LlmReply | str = await self.summariser.complete(request)
        else:
            turn = ctx.get(TurnUsage)  # every model call of the turn, answered or not
            used = sum((call.usage for call in calls), turn.total if turn is not None else Usage(0, 0))
            reply = await guard.guarded(ctx, used, request, asked, lambda: self.summariser.complete(request))
        if isinstance(reply, str):
            _log.warning("compaction.skipped", session_id=ctx.session.id, turn_id=ctx.turn_id, reason=reply)
            return None
        if reply.usage is not None:
            model = reply.model or asked
            calls.append(RecordedCall(model, reply.usage, self.prices.cost(model, reply.usage)))
        return reply

    def fits_as_read(self, ctx: AgentContext) -> bool:
        """Whether the history context building read after the summary (all of it), with the
        exchange this turn wrote, is within `history_window` messages and the room: nothing to fold."""
        seen, outcome = ctx.get(UnsummarisedHistory), ctx.turn_outcome
        if seen is None or not seen.complete or outcome is None:
            return False
        exchange = exchange_messages(turn_user_text(ctx), outcome.assistant_text)
        tokens = seen.tokens + sum(message_tokens(self.counter, m, self.model) for m in exchange)
        return seen.messages + len(exchange) <= self.history_window and tokens <= self.room

    def _summariser_room(self) -> int:
        """How many tokens of turns one summariser call reads: its prompt less the previous summary's share."""
        return max(1, self.budget.prompt - 2 * self.budget.share(self.budget.summary) - MESSAGE_OVERHEAD * 2)

    def learn(self, ctx: AgentContext) -> None:
        """Correct a learning counter by the input tokens the model reported for the turn's prompt,
        when the turn made one model call (no tool ran), so the prompt is what was counted."""
        response, prompt, executions = ctx.get(LlmResponse), ctx.get(PromptContext), ctx.get(ToolExecutions)
        if self._learner is None or response is None or response.usage is None or prompt is None:
            return
        if executions is not None and executions.executions:
            return
        estimated = prompt_tokens(self.counter, prompt, self.model) + texts_tokens(self.counter, self._tool_texts, self.model)
        self._learner.learn(self.model, estimated, response.usage.input_tokens)
