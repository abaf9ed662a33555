"""Context within a token budget: the prompt never outgrows it, and compaction keeps what older turns said."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest
from structlog.testing import capture_logs

from agentloop import (
    DEFAULT_COMPANY, AgentContext, AgentLoop, BudgetLimit, Budgets, BudgetScope, CallUsage, ChatMessage, ContextBudget,
    EstimatedTokens, FinishReason, IncomingMessage, LlmReply, LlmRequest, ModelPrice, OutgoingResponse, Prices, PromptContext,
    SanitizedInput, Session, TurnOutcome, TurnUsage, Usage, history_scope,
)
from agentloop.adapters import InMemorySummaryStore, open_stores
from agentloop.bots import apply_budgets
from agentloop.ports import Period, SessionSummary, UsageFilter, UsageGroup
from agentloop.scopes import Scope
from agentloop.testing import RecordingChannel, ScriptedLLM, make_context, run_system_sync
from agentloop.tokens import prompt_tokens
from systems import ContextBuildingSystem
from systems.budgets import BudgetGuard
from systems.compaction import CompactionSystem
from systems.tool_loop import ToolLoopSystem
from systems.standard import StandardOptions, standard_pipeline

from compaction_kit import BUDGET, ForgetfulBot


def test_a_2000_turn_session_stays_within_its_budget_and_still_knows_what_turn_3_said(tmp_path: Path) -> None:
    """The scripted summariser carries facts forward, so the fact of turn 3 survives every summary of a summary."""
    counter = EstimatedTokens()
    bot = ForgetfulBot(counter)
    options = StandardOptions(context_budget=BUDGET, token_counter=counter, history_window=60, memory_limit=0, rag_k=0)
    session = Session("long", user_id="ada")
    with open_stores(tmp_path) as stores, standard_pipeline(ScriptedLLM(bot.reply), RecordingChannel(), stores=stores, options=options) as pipeline:
        loop = pipeline.build()
        for turn in range(1, 2001):
            text = "FACT: my cat is called Tom" if turn == 3 else f"Turn {turn}: " + "some chatter about the weather " * (turn % 9)
            loop.run_turn_sync(session, IncomingMessage(text))
        answer = loop.run_turn_sync(session, IncomingMessage("What is my cat called?"))
        versions = asyncio.run(stores.summaries.versions(history_scope(session)))
    assert answer.turn_outcome is not None and answer.turn_outcome.assistant_text == "Your cat is called Tom."
    assert max(bot.sizes) <= BUDGET.prompt
    assert len(versions) > 10 and [v.version for v in versions] == list(range(1, len(versions) + 1))
    assert all("FACT: my cat is called Tom" in v.text for v in versions)


class OneHistory:
    """The history of every session is `messages` (a SessionStore for one property example)."""

    def __init__(self, messages: list[ChatMessage]) -> None:
        self.messages = messages

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        self.messages += messages
        return True

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        return tuple(self.messages[-limit:]) if limit > 0 else ()

    async def count(self, scope: Scope) -> int:
        return len(self.messages)


@settings(max_examples=100, deadline=None)
@given(
    system=st.integers(0, 400),
    current=st.integers(1, 400),
    sizes=st.lists(st.integers(0, 3_000), max_size=40),
    summary=st.integers(0, 4_000),
    window=st.integers(1_200, 6_000),
)
def test_the_built_prompt_never_exceeds_its_budget_and_keeps_the_system_prompt_and_message(
    system: int, current: int, sizes: list[int], summary: int, window: int
) -> None:
    """Context budget: whatever the sizes of history, summary and message, the prompt fits the budget
    and always holds the system prompt and the user's current message."""
    budget = ContextBudget(window=window, answer_reserve=200)
    counter = EstimatedTokens()
    history = [ChatMessage.user("u" * n) if i % 2 == 0 else ChatMessage.assistant("a" * n) for i, n in enumerate(sizes)]
    summaries = InMemorySummaryStore()
    session = Session("s", user_id="ada")
    if summary:
        asyncio.run(summaries.add(SessionSummary(history_scope(session), 1, 0, "s" * summary, datetime(2026, 1, 1, tzinfo=UTC))))
    system_prompt = "p" * system
    context = ContextBuildingSystem(system_prompt, sessions=OneHistory(history), history_window=100, budget=budget,
                                    counter=counter, summaries=summaries)
    ctx = make_context(session=session, components=[SanitizedInput("m" * current)])
    run_system_sync(context, ctx)
    prompt = ctx.require(PromptContext)
    assert prompt_tokens(counter, prompt) <= budget.prompt - budget.share(budget.notes)
    assert prompt.system_prompt == system_prompt and prompt.messages[-1] == ChatMessage.user("m" * current)


class Counted:
    """A store whose every call is counted (`calls`) and passed on to `inner`."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> object:
        self.calls += 1
        return getattr(self.inner, name)


def test_a_turn_whose_history_fits_reads_no_store_for_compaction(tmp_path: Path) -> None:
    """Context building says what it read after the summary; compaction adds the turn's exchange and, while
    that fits, asks neither the history nor the summaries (and fails no turn)."""
    options = StandardOptions(history_window=20, memory_limit=0, rag_k=0)
    with open_stores(tmp_path) as stores, standard_pipeline(ScriptedLLM(lambda request: "Fine."), RecordingChannel(), stores=stores, options=options) as pipeline:
        (compaction,) = [s for s in pipeline.systems if isinstance(s, CompactionSystem)]
        compaction.sessions, compaction.summaries = Counted(stores.sessions), Counted(stores.summaries)  # type: ignore[assignment]
        loop = pipeline.build()
        for turn in range(10):  # 20 messages: within the window of 20
            assert not loop.run_turn_sync(Session("s", user_id="ada"), IncomingMessage(f"turn {turn}")).failures
        assert compaction.sessions.calls == compaction.summaries.calls == 0  # type: ignore[attr-defined]
        loop.run_turn_sync(Session("s", user_id="ada"), IncomingMessage("turn 10 outgrows the window"))
        assert compaction.summaries.calls > 0  # type: ignore[attr-defined]
        (summary,) = asyncio.run(stores.summaries.versions(history_scope(Session("s", user_id="ada"))))
    assert summary.covered > 0


class AlwaysReading(CompactionSystem):
    """Compaction that measures from the stores every turn, as without context building's read."""

    def fits_as_read(self, ctx: AgentContext) -> bool:
        return False


def test_compaction_folds_the_same_turns_from_context_buildings_read_as_from_the_stores(tmp_path: Path) -> None:
    """Measuring what context building read plus the turn's exchange decides exactly as reading the stores:
    the same summaries (versions and what they cover) and the same prompts, turn after turn."""
    runs = []
    for name, kind in (("read", CompactionSystem), ("stores", AlwaysReading)):
        counter = EstimatedTokens()
        bot = ForgetfulBot(counter)
        options = StandardOptions(context_budget=BUDGET, token_counter=counter, history_window=24, memory_limit=0, rag_k=0)
        session = Session("equal", user_id="ada")
        with open_stores(tmp_path / name) as stores, standard_pipeline(ScriptedLLM(bot.reply), RecordingChannel(), stores=stores, options=options) as pipeline:
            (compaction,) = [s for s in pipeline.systems if isinstance(s, CompactionSystem)]
            compaction.__class__ = kind
            loop = pipeline.build()
            for turn in range(150):
                text = f"Turn {turn}: " + "words about the garden " * ((turn * 7) % 23)
                assert not loop.run_turn_sync(session, IncomingMessage(text)).failures
            versions = asyncio.run(stores.summaries.versions(history_scope(session)))
        runs.append(([(v.version, v.covered) for v in versions], bot.sizes))
    assert runs[0] == runs[1] and len(runs[0][0]) > 5


def _chatter_turns(loop: AgentLoop, session: Session, turns: int) -> list[str]:
    """Run `turns` turns of weather chatter in `session`; the text of each answer."""
    answers = []
    for _ in range(turns):
        result = loop.run_turn_sync(session, IncomingMessage("chatter about the weather " * 5))
        assert result.turn_outcome is not None
        answers.append(result.turn_outcome.assistant_text)
    return answers


def test_every_summariser_call_is_recorded_as_usage_under_the_summary_model(tmp_path: Path) -> None:
    """Compaction's model calls are usage too: the calls recorded equal the calls the scripted models received,
    and the summariser's are stored under its own model with the cost of its own price."""
    received = {"main": 0, "small": 0}

    def main(request: LlmRequest) -> LlmReply:
        received["main"] += 1
        return LlmReply("ok " * 30, usage=Usage(100, 10), model="main")

    def small(request: LlmRequest) -> LlmReply:
        received["small"] += 1
        return LlmReply("the user chatted about the weather", usage=Usage(300, 20), model="small")

    prices = Prices({"main": ModelPrice(1.0, 2.0), "small": ModelPrice(0.5, 1.0)})
    options = StandardOptions(
        context_budget=ContextBudget(window=1500, answer_reserve=300), memory_limit=0, rag_k=0,
        summariser=ScriptedLLM(small, model="small"), summary_model="small", prices=prices,
    )
    session = Session("s", user_id="u")
    with open_stores(tmp_path) as stores, standard_pipeline(ScriptedLLM(main, model="main"), RecordingChannel(), stores=stores,
                                                            options=options) as pipeline:
        _chatter_turns(pipeline.build(), session, 60)
        lines = asyncio.run(stores.usage.report(UsageFilter(company_id=DEFAULT_COMPANY), UsageGroup.MODEL))
    by_model = {line.key: line.total for line in lines}
    assert received["small"] > 0
    assert {model: total.calls for model, total in by_model.items()} == received
    assert by_model["small"].usage == Usage(300 * received["small"], 20 * received["small"])
    assert by_model["small"].cost == pytest.approx(received["small"] * (300 * 0.5 + 20 * 1.0) / 1e6)


def test_a_used_up_budget_stops_compaction_calls_and_the_turns_still_answer(tmp_path: Path) -> None:
    """Each summariser call reserves on the budgets as a turn's call does: once the session's daily cost
    budget has no room for one, compaction is skipped (one log line) and every turn is still answered."""
    received: list[int] = []
    main = ScriptedLLM(lambda request: LlmReply("ok " * 30, usage=Usage(100, 10), model="main"), model="main")

    def small(request: LlmRequest) -> LlmReply:
        received.append(1)
        return LlmReply("the user chatted about the weather", usage=Usage(100, 10), model="small")

    limit = BudgetLimit(BudgetScope.SESSION, Period.DAY, cost=0.02)
    options = StandardOptions(
        context_budget=ContextBudget(window=1500, answer_reserve=300), memory_limit=0, rag_k=0,
        summariser=ScriptedLLM(small, model="small"), summary_model="small",
        prices=Prices({"main": ModelPrice(0, 0), "small": ModelPrice(10.0, 10.0)}),
        budgets=Budgets(limits=(limit,), output_reserve=100),
    )
    session = Session("s", user_id="u")
    with (open_stores(tmp_path) as stores,
          standard_pipeline(main, RecordingChannel(), stores=stores, options=options) as pipeline, capture_logs() as logs):
        loop = pipeline.build()
        answers: list[str] = []
        while not any(entry["event"] == "compaction.skipped" for entry in logs) and len(answers) < 400:
            answers += _chatter_turns(loop, session, 1)
        stopped_at = len(received)
        answers += _chatter_turns(loop, session, 30)
        recorded = asyncio.run(stores.usage.total(UsageFilter(company_id=DEFAULT_COMPANY)))
    assert 0 < stopped_at == len(received)
    assert set(answers) == {"ok " * 30}
    assert recorded.calls == len(answers) + len(received)
    assert recorded.cost <= limit.cost
    skipped = [entry for entry in logs if entry["event"] == "compaction.skipped"]
    assert skipped and "session's daily budget" in skipped[0]["reason"]


def test_summaries_are_asked_of_the_summariser_for_the_summary_model(tmp_path: Path) -> None:
    """`StandardOptions.summariser` and `summary_model` are who is asked for a summary, and for which model:
    the bot's own model only answers the turns."""
    main_requests: list[LlmRequest] = []
    summary_requests: list[LlmRequest] = []

    def main(request: LlmRequest) -> LlmReply:
        main_requests.append(request)
        return LlmReply("ok " * 30, usage=Usage(100, 10))

    def small(request: LlmRequest) -> LlmReply:
        summary_requests.append(request)
        return LlmReply("the user chatted about the weather", usage=Usage(100, 10))

    options = StandardOptions(
        context_budget=ContextBudget(window=1500, answer_reserve=300), memory_limit=0, rag_k=0, model="big-model",
        summariser=ScriptedLLM(small), summary_model="small-model",
    )
    with standard_pipeline(ScriptedLLM(main), RecordingChannel(), data_dir=tmp_path, options=options) as pipeline:
        _chatter_turns(pipeline.build(), Session("s", user_id="u"), 60)
    assert summary_requests and len(main_requests) == 60
    assert {request.model for request in summary_requests} == {"small-model"}
    assert {request.model for request in main_requests} == {"big-model"}
    assert all("summar" in (request.messages[0].content or "").lower() for request in summary_requests)
    assert not any("summar" in (request.messages[0].content or "").lower() for request in main_requests)


def test_a_budget_for_a_listed_window_keeps_a_reserve_that_fits_it() -> None:
    """`ContextBudget.for_window`: the listed window with the default reserve, or a quarter of a small window;
    an unknown window is the default budget."""
    assert ContextBudget.for_window(None) == ContextBudget()
    assert (ContextBudget.for_window(20_000).window, ContextBudget.for_window(20_000).answer_reserve) == (20_000, 4_096)
    assert (ContextBudget.for_window(2_048).window, ContextBudget.for_window(2_048).answer_reserve) == (2_048, 512)


def _stopped_turn_context(session: Session, used: Usage) -> AgentContext:
    """A turn that stopped (no `LlmResponse`) after model calls that used `used` tokens."""
    outcome = TurnOutcome(FinishReason.ITERATION_LIMIT, "stopped", OutgoingResponse("stopped"))
    return make_context("more", session=session, components=[outcome, TurnUsage((CallUsage("main", used),))])


def test_a_stopped_turns_usage_counts_towards_the_summarisers_turn_budget(tmp_path: Path) -> None:
    """A turn that compacts without answering (stopped, or a plan) has used tokens all the same:
    its `TurnUsage` counts towards `turn_tokens`, so a summariser call that would pass it is skipped."""
    summarised: list[LlmRequest] = []

    def small(request: LlmRequest) -> LlmReply:
        summarised.append(request)
        return LlmReply("the user chatted", usage=Usage(10, 5))

    session = Session("s", user_id="u")
    with open_stores(tmp_path) as stores, capture_logs() as logs:
        asyncio.run(stores.sessions.append(history_scope(session, DEFAULT_COMPANY),
                                           [ChatMessage.user("chatter") if i % 2 == 0 else ChatMessage.assistant("ok") for i in range(12)]))
        guard = BudgetGuard(Budgets(turn_tokens=1_000, output_reserve=10), None, prices=Prices(), company_id=DEFAULT_COMPANY)
        system = CompactionSystem(ScriptedLLM(small), sessions=stores.sessions, summaries=stores.summaries,
                                  history_window=4, budget_guard=guard)
        run_system_sync(system, _stopped_turn_context(session, Usage(900, 100)))
    assert summarised == []
    assert [entry["reason"] for entry in logs if entry["event"] == "compaction.skipped"] == [
        "the turn's budget (1000 tokens) is used up"
    ]


def _skips_over_turn_budget(compaction: CompactionSystem, session: Session) -> bool:
    """Whether `compaction`, after a stopped turn of 1,000 tokens in `session` (12 messages stored), skips its summariser."""
    asyncio.run(compaction.sessions.append(history_scope(session, DEFAULT_COMPANY),
                                           [ChatMessage.user("chatter") if i % 2 == 0 else ChatMessage.assistant("ok") for i in range(12)]))
    with capture_logs() as logs:
        run_system_sync(compaction, _stopped_turn_context(session, Usage(900, 100)))
    return any(entry["event"] == "compaction.skipped" for entry in logs)


def test_budgets_given_after_the_build_reach_compaction_through_the_tool_loops_current_guard(tmp_path: Path) -> None:
    """Compaction checks on the tool loop's guard as it is now: budgets set on the tool loop's settings after the
    build, or by `apply_budgets` (a turn-tokens-only budget too, to a compaction made without a usage store)."""
    turn_only = Budgets(turn_tokens=1_000, output_reserve=10)
    summariser = ScriptedLLM(lambda request: LlmReply("the user chatted", usage=Usage(10, 5)))
    options = StandardOptions(history_window=4, summariser=summariser)
    with open_stores(tmp_path) as stores, standard_pipeline(ScriptedLLM(), RecordingChannel(), stores=stores,
                                                            options=options) as pipeline:
        loop = pipeline.build()
        tool_loop, compaction = pipeline.get(ToolLoopSystem), pipeline.get(CompactionSystem)
        assert not _skips_over_turn_budget(compaction, Session("before", user_id="u"))
        tool_loop.settings = attrs.evolve(tool_loop.settings, budgets=turn_only)
        assert compaction.guard is tool_loop.budget and _skips_over_turn_budget(compaction, Session("after", user_id="u"))
        own = CompactionSystem(summariser, sessions=stores.sessions, summaries=stores.summaries, history_window=4)
        mine = AgentLoop([system if system is not compaction else own for system in loop.systems])
        apply_budgets(mine, turn_only)
        assert own.guard is tool_loop.budget and _skips_over_turn_budget(own, Session("own", user_id="u"))


@pytest.mark.parametrize("listed", [32_768, 128_000, 200_000, 1_000_000])
def test_a_listed_window_larger_than_the_default_is_capped_to_the_default_budget(listed: int) -> None:
    """A server's window can only lower the default budget (32,768 tokens): history would otherwise grow to a
    200k or 1M window before compaction; a larger budget is configured (`context_budget`), never derived."""
    assert ContextBudget.for_window(listed) == ContextBudget()
