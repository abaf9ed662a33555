"""Budgets through the standard pipeline: each limit stops a turn BUDGET_EXCEEDED with the stop
text, before the model call or tool step that would pass it; no budget, no store read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from agentloop import (
    DEFAULT_COMPANY,
    BudgetLimit,
    Budgets,
    BudgetScope,
    ChatMessage,
    FailureKind,
    FinishReason,
    IncomingMessage,
    LlmCallError,
    LlmReply,
    LlmRequest,
    ModelPrice,
    Prices,
    Session,
    ToolExecutions,
    ToolLoopStop,
    Usage,
    approval_scope,
    history_scope,
    tool,
)
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.adapters.usage import MemoryUsageStore
from agentloop.ports import Charge, Period, Spent
from agentloop.testing import RecordingChannel, make_context
from systems import StandardOptions, release_budgets, standard_pipeline
from systems.budgets import BudgetGuard
from systems.outcome import DEFAULT_STOP_TEXTS
from systems.tool_loop import ToolLoopSystem

ADA = Session("s1", user_id="ada", project_id="p1", team_id="t1", org_id="o1")
BOB = Session("s2", user_id="bob", project_id="p1", team_id="t1", org_id="o1")
OTHER_TEAM = Session("s3", user_id="cy", project_id="p1", team_id="t2", org_id="o1")
PRICES = Prices({"m": ModelPrice(input=100.0, output=0.0)})
"""$0.10 for a call of 1,000 input tokens."""


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def always_looking(request: LlmRequest) -> LlmReply:
    """A model that asks for a lookup on every call, 1,000 tokens in and 50 out each."""
    return attrs.evolve(ScriptedLLM.tool_call("lookup", {"query": "x"}), usage=Usage(1000, 50), model="m")


def answering(request: LlmRequest) -> LlmReply:
    return LlmReply("done", usage=Usage(1000, 0), model="m")


def _run(tmp_path: Path, llm: ScriptedLLM, budgets: Budgets, *sessions: Session, **options: Any) -> tuple[list[Any], Spent]:
    """The turns of `sessions`, one after another, and what the ledger line of the first limit holds for ADA."""
    opts = StandardOptions(budgets=budgets, prices=options.pop("prices", PRICES), compaction=False, **options)
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[lookup], options=opts) as pipeline:
        loop = pipeline.build()
        results = [loop.run_turn_sync(session, IncomingMessage("look it up")) for session in sessions]
        spent = Spent()
        asyncio.run(release_budgets(pipeline.systems))  # the ledger then holds what was used, no lease
        if budgets.limits:
            key = budgets.limits[0].key(history_scope(ADA, DEFAULT_COMPANY), results[0].clock.now())
            spent = asyncio.run(pipeline.stores.usage.spent(key))
    return results, spent


def test_a_turn_token_budget_stops_the_tool_loop_before_the_step_that_would_pass_it(tmp_path: Path) -> None:
    llm = ScriptedLLM(always_looking)
    (ctx,), _ = _run(tmp_path, llm, Budgets(turn_tokens=2000, output_reserve=100), ADA)
    outcome = ctx.turn_outcome
    assert outcome.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert outcome.outgoing_response.text == DEFAULT_STOP_TEXTS[FinishReason.BUDGET_EXCEEDED] and outcome.fallback
    assert len(llm.requests) == 2 and len(ctx.require(ToolExecutions).executions) == 1
    assert outcome.assistant_text is None  # nothing half-done is stored as the answer


def test_a_turn_token_budget_refuses_a_model_call_whose_estimate_would_pass_it(tmp_path: Path) -> None:
    llm = ScriptedLLM(answering)
    (ctx,), _ = _run(tmp_path, llm, Budgets(turn_tokens=500, output_reserve=1024), ADA)
    assert ctx.turn_outcome.finish_reason is FinishReason.BUDGET_EXCEEDED and llm.requests == []


def test_a_tenant_daily_cost_budget_counts_every_session_of_the_tenant_and_no_other(tmp_path: Path) -> None:
    """Three turns of $0.10 fit under $0.25 by their estimates; the fourth, of another user of the tenant, is refused."""
    budgets = Budgets(limits=(BudgetLimit(BudgetScope.TENANT, Period.DAY, cost=0.25),), output_reserve=0)
    results, spent = _run(tmp_path, ScriptedLLM(answering, model="m"), budgets, ADA, BOB, ADA, BOB, OTHER_TEAM)
    reasons = [ctx.turn_outcome.finish_reason for ctx in results]
    assert reasons == [FinishReason.SUCCESS] * 3 + [FinishReason.BUDGET_EXCEEDED, FinishReason.SUCCESS]
    assert results[3].require(ToolLoopStop).detail == "the tenant's daily budget ($0.25) is used up"
    assert spent.tokens == 3000 and spent.cost == pytest.approx(0.30)  # over by less than one call's worth


def test_a_session_monthly_token_budget_stops_that_session_only(tmp_path: Path) -> None:
    budgets = Budgets(limits=(BudgetLimit(BudgetScope.SESSION, Period.MONTH, tokens=1500),), output_reserve=0)
    results, _ = _run(tmp_path, ScriptedLLM(answering), budgets, ADA, ADA, ADA, BOB)
    reasons = [ctx.turn_outcome.finish_reason for ctx in results]
    assert reasons == [FinishReason.SUCCESS, FinishReason.SUCCESS, FinishReason.BUDGET_EXCEEDED, FinishReason.SUCCESS]


def test_an_unknown_price_under_a_cost_budget_counts_tokens_and_says_the_cost_is_unknown(tmp_path: Path) -> None:
    budgets = Budgets(limits=(BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=100_000, cost=1.0),), output_reserve=0)
    llm = ScriptedLLM(lambda request: LlmReply("done", usage=Usage(1000, 0), model="private-model"))
    with capture_logs() as logs:
        (ctx,), spent = _run(tmp_path, llm, budgets, ADA, prices=Prices(use_table=False))
    assert ctx.turn_outcome.finish_reason is FinishReason.SUCCESS
    assert any(log["event"] == "budget.cost_unknown" and log["model"] == "private-model" for log in logs)
    assert spent == Spent(1000, 0.0)


class CountingUsage(MemoryUsageStore):
    """A usage store that counts the ledger calls made on it."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger_calls = 0

    async def reserve(self, charges: Any) -> Charge | None:
        self.ledger_calls += 1
        return await super().reserve(charges)

    async def spend(self, charges: Any) -> None:
        self.ledger_calls += 1
        await super().spend(charges)


def _counted(tmp_path: Path, budgets: Budgets) -> int:
    usage = CountingUsage()
    opts = StandardOptions(budgets=budgets, prices=PRICES, compaction=False, max_llm_calls=3)
    with standard_pipeline(ScriptedLLM(always_looking), RecordingChannel(), data_dir=tmp_path, tools=[lookup], options=opts) as pipeline:
        tool_loop = pipeline.get(ToolLoopSystem)
        if tool_loop.budget is not None:
            tool_loop.budget.usage = usage
        pipeline.build().run_turn_sync(ADA, IncomingMessage("look it up"))
    return usage.ledger_calls


def test_without_a_budget_no_check_touches_the_store_and_with_one_the_lease_saves_every_check_but_the_first(tmp_path: Path) -> None:
    assert _counted(tmp_path / "none", Budgets()) == 0
    assert _counted(tmp_path / "turn", Budgets(turn_tokens=1_000_000)) == 0  # a turn's budget is counted in memory
    daily = BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=1_000_000)
    # without a lease: three model calls (a reservation and a settlement each) and their three tool steps (one check each)
    assert _counted(tmp_path / "unleased", Budgets(limits=(daily,), lease=0)) == 3 * 2 + 3
    # with one: the first call leases 1% of the limit beside its estimate, the rest is counted in memory,
    # and closing the pipeline gives back what is left
    assert _counted(tmp_path / "leased", Budgets(limits=(daily,))) == 2


def test_a_decision_over_budget_leaves_its_approval_pending(tmp_path: Path) -> None:
    @tool(requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        return f"deleted {name}"

    ask = attrs.evolve(ScriptedLLM.tool_call("delete", {"name": "a"}), usage=Usage(4000, 0), model="m")
    script = ScriptedLLM([ask, LlmReply("hello", usage=Usage(2000, 0), model="m"), "gone"])
    budgets = Budgets(limits=(BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=5000),), output_reserve=0)
    opts = StandardOptions(budgets=budgets, prices=PRICES, compaction=False)
    with standard_pipeline(script, RecordingChannel(), data_dir=tmp_path, tools=[delete], options=opts) as pipeline:
        loop = pipeline.build()
        asked = loop.run_turn_sync(ADA, IncomingMessage("delete a"))
        request = asked.turn_outcome.approval
        meanwhile = loop.run_turn_sync(BOB, IncomingMessage("hi"))  # another user of the tenant uses up its budget
        decided = loop.run_turn_sync(ADA, IncomingMessage.approval(request.approval_id, approved=True))
        pending = asyncio.run(pipeline.stores.approvals.pending(approval_scope(ADA, DEFAULT_COMPANY), ADA.id))
    assert asked.turn_outcome.finish_reason is FinishReason.AWAITING_APPROVAL
    assert meanwhile.turn_outcome.finish_reason is FinishReason.SUCCESS
    assert decided.turn_outcome.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert [p.request.approval_id for p in pending] == [request.approval_id]
    assert script.remaining == 1  # the model was not asked again


def test_a_budget_that_ends_the_turn_after_the_first_delta_withdraws_what_was_streamed(tmp_path: Path) -> None:
    """A streamed partial answer is handled as at a deadline: the stream is aborted, the stop text is
    sent in its place and nothing of the partial answer is stored."""

    def looking_aloud(request: LlmRequest) -> LlmReply:
        return attrs.evolve(always_looking(request), content="Let me look that up")

    channel = RecordingChannel()
    options = StandardOptions(budgets=Budgets(turn_tokens=2000, output_reserve=100), prices=PRICES, compaction=False)
    with standard_pipeline(ScriptedLLM(looking_aloud, model="m", chunk=5), channel, data_dir=tmp_path, tools=[lookup],
                           options=options) as pipeline:
        ctx = pipeline.build().run_turn_sync(ADA, IncomingMessage("look it up"))
        history = asyncio.run(pipeline.stores.sessions.recent(history_scope(ADA, DEFAULT_COMPANY), 10))
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.BUDGET_EXCEEDED
    (stream,) = channel.streams
    assert stream.shown.startswith("Let me") and stream.aborted and stream.closed is None
    assert channel.texts == [DEFAULT_STOP_TEXTS[FinishReason.BUDGET_EXCEEDED]]
    assert outcome.assistant_text is None
    assert "Let me look that up" not in [message.content for message in history]


def test_a_guarded_call_settles_to_its_usage_gives_back_a_failed_calls_reservation_and_is_never_made_over_budget() -> None:
    """`BudgetGuard.guarded`, the one reserve-call-settle both the tool loop and compaction use: the ledger
    holds what an answered call used, nothing for one that raised, and a call over budget is not made."""
    limit = BudgetLimit(BudgetScope.SESSION, Period.DAY, tokens=5_000)
    usage = MemoryUsageStore()
    guard = BudgetGuard(Budgets(limits=(limit,), output_reserve=1_000, lease=0), usage, prices=PRICES, company_id=DEFAULT_COMPANY)
    ctx = make_context("hi", session=ADA)
    key = limit.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    request = LlmRequest((ChatMessage.user("hi"),))
    made: list[str] = []

    async def failing() -> LlmReply:
        made.append("failing")
        raise LlmCallError("the model is down", kind=FailureKind.UNAVAILABLE)

    async def answering_call() -> LlmReply:
        made.append("answering")
        return LlmReply("done", usage=Usage(4_000, 50), model="m")

    async def scenario() -> tuple[Spent, Spent, LlmReply | str, Spent]:
        with pytest.raises(LlmCallError):
            await guard.guarded(ctx, Usage(0, 0), request, "m", failing)
        after_failure = await usage.spent(key)
        await guard.guarded(ctx, Usage(0, 0), request, "m", answering_call)
        after_answer = await usage.spent(key)
        refused = await guard.guarded(ctx, Usage(0, 0), request, "m", answering_call)
        return after_failure, after_answer, refused, await usage.spent(key)

    after_failure, after_answer, refused, after_refusal = asyncio.run(scenario())
    assert after_failure.tokens == 0
    assert after_answer.tokens == 4_050 and after_answer.cost == pytest.approx(0.4)
    assert refused == "the session's daily budget (5000 tokens) is used up"
    assert after_refusal == after_answer
    assert made == ["failing", "answering"]


LINE = BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=100_000)
"""A tenant's daily 100,000 tokens: a lease of 1% is 1,000 of them."""


def _guard(usage: MemoryUsageStore, limit: BudgetLimit = LINE, **budgets: Any) -> BudgetGuard:
    return BudgetGuard(Budgets(limits=(limit,), output_reserve=100, **budgets), usage, prices=PRICES, company_id=DEFAULT_COMPANY)


def _using(tokens: int) -> Any:
    async def call() -> LlmReply:
        return LlmReply("done", usage=Usage(tokens, 0), model="m")

    return call


def test_calls_reserve_and_settle_on_the_guards_lease_and_the_ledger_never_counts_less_than_was_used() -> None:
    usage = CountingUsage()
    guard = _guard(usage)
    ctx = make_context("hi", session=ADA)
    key = LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> tuple[list[int], list[int], Spent]:
        ledger, calls = [], []
        for used in (300, 300, 300, 2_000, 300):  # the fourth uses more than the lease holds
            await guard.guarded(ctx, Usage(0, 0), request, "m", _using(used))
            ledger.append((await usage.spent(key)).tokens)
            calls.append(usage.ledger_calls)
        await guard.release()
        return ledger, calls, await usage.spent(key)

    ledger, calls, released = asyncio.run(scenario())
    used_so_far = [300, 600, 900, 2_900, 3_200]
    assert all(counted >= used for counted, used in zip(ledger, used_so_far, strict=True))
    assert calls == [1, 1, 1, 2, 3]  # the lease, nothing, nothing, the overrun written, a new lease (the old one was used up)
    assert released.tokens == 3_200 and not guard.holds  # given back, the ledger holds what was used


def test_lines_beyond_those_kept_are_given_back_and_a_session_coming_back_leases_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for one line, each other session's call gives the last one's lease back: what the guard held of it
    (the lines a session's calls reuse without a lookup) is written, and nothing used is lost on the way."""
    monkeypatch.setattr("systems.budgets.LINES_KEPT", 1)
    usage = CountingUsage()
    limit = BudgetLimit(BudgetScope.SESSION, Period.DAY, tokens=100_000)
    guard = _guard(usage, limit)
    contexts = [make_context("hi", session=session) for session in (ADA, BOB)]
    keys = [limit.key(history_scope(ctx.session, DEFAULT_COMPANY), ctx.clock.now()) for ctx in contexts]
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> tuple[list[int], list[Spent], list[Spent]]:
        writes, given_back = [], []
        for ctx in (contexts[0], contexts[0], contexts[1], contexts[0], contexts[0]):
            await guard.guarded(ctx, Usage(0, 0), request, "m", _using(300))
            writes.append(usage.ledger_calls)
        given_back = [await usage.spent(key) for key in keys]  # BOB's, given back as ADA came back; ADA's still leased
        await guard.release()
        return writes, given_back, [await usage.spent(key) for key in keys]

    writes, given_back, released = asyncio.run(scenario())
    assert writes == [1, 1, 3, 5, 5]  # ADA's lease; BOB's, and ADA's given back; ADA's again, and BOB's given back
    assert given_back[1].tokens == 300
    assert [spent.tokens for spent in released] == [4 * 300, 300]


def test_a_guard_used_again_after_its_release_leases_again_and_counts_every_call() -> None:
    """A guard's leases given back (a worker's settings reloaded, say) and the guard asked again: its calls
    reserve on fresh leases, not on what it gave back, and given back again, each line holds what was used."""
    usage = MemoryUsageStore()
    limits = (BudgetLimit(BudgetScope.SESSION, Period.DAY, tokens=100_000), LINE)
    guard = BudgetGuard(Budgets(limits=limits, output_reserve=100), usage, prices=PRICES, company_id=DEFAULT_COMPANY)
    ctx = make_context("hi", session=ADA)
    keys = [limit.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now()) for limit in limits]
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> list[Spent]:
        for _ in range(2):
            for _ in range(2):
                await guard.guarded(ctx, Usage(0, 0), request, "m", _using(300))
            await guard.release()
        return [await usage.spent(key) for key in keys]

    assert [spent.tokens for spent in asyncio.run(scenario())] == [1_200, 1_200]


def test_a_call_the_lease_does_not_cover_is_counted_and_priced_once_on_its_way_to_the_store() -> None:
    """The first call on a line reserves on the store: its prompt is counted once, and a model without a price
    is logged once, as on the calls that the lease covers."""
    counted: list[str] = []

    class Counting:
        def count(self, text: str, model: str | None = None) -> int:
            counted.append(text)
            return 10

    limit = BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=100_000, cost=5.0)
    guard = BudgetGuard(Budgets(limits=(limit,), output_reserve=100), MemoryUsageStore(), prices=PRICES,
                        company_id=DEFAULT_COMPANY, tokens=Counting())
    ctx = make_context("hi", session=ADA)
    request = LlmRequest((ChatMessage.user("hi"),))

    async def call() -> LlmReply:
        return LlmReply("done", usage=Usage(10, 0), model="unpriced")

    with capture_logs() as logs:
        assert isinstance(asyncio.run(guard.guarded(ctx, Usage(0, 0), request, "unpriced", call)), LlmReply)
    assert counted == ["hi"]
    assert [log["model"] for log in logs if log["event"] == "budget.cost_unknown"] == ["unpriced", "unpriced"]  # before and after


def test_near_the_limit_a_second_process_leases_only_what_a_call_needs_and_the_limit_holds() -> None:
    """Two guards (two workers) on one ledger with leases of half the limit: the second cannot take half, so it
    takes what each call needs; neither passes the limit, and given back, the ledger holds what was used."""
    usage = MemoryUsageStore()
    limit = BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=5_000)
    first, second = _guard(usage, limit, lease=0.5), _guard(usage, limit, lease=0.5)
    ctx = make_context("hi", session=ADA)
    key = limit.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> tuple[list[LlmReply | str], Spent]:
        answers = []
        for _ in range(12):
            for guard in (first, second):
                answers.append(await guard.guarded(ctx, Usage(0, 0), request, "m", _using(400)))
        await first.release()
        await second.release()
        return answers, await usage.spent(key)

    answers, released = asyncio.run(scenario())
    made = sum(isinstance(answer, LlmReply) for answer in answers)
    by_second = sum(isinstance(answer, LlmReply) for answer in answers[1::2])
    # the limit holds (passed by no more than one call's use beyond its estimate), little of it is left
    # unspent for the first's lease, and the second made calls beside the first's lease
    assert 5_000 - 400 < made * 400 <= 5_000 + 400 and by_second >= 5
    assert "the tenant's daily budget (5000 tokens) is used up" in answers
    assert released.tokens == made * 400


def test_a_release_the_store_refuses_is_one_log_line_and_the_leases_stay_on_the_ledger() -> None:
    class Failing(MemoryUsageStore):
        async def spend(self, charges: Any) -> None:
            raise ConnectionError("the database is gone")

    guard = _guard(Failing())
    ctx = make_context("hi", session=ADA)

    async def scenario() -> None:
        await guard.guarded(ctx, Usage(0, 0), LlmRequest((ChatMessage.user("hi"),)), "m", _using(300))
        await guard.release()

    with capture_logs() as logs:
        asyncio.run(scenario())
    (kept,) = [log for log in logs if log["event"] == "budget.leases_kept"]
    assert kept["lines"] == 1 and "the database is gone" in kept["error"]


def test_closing_a_pipeline_gives_back_its_guards_leases(tmp_path: Path) -> None:
    usage = MemoryUsageStore()
    opts = StandardOptions(budgets=Budgets(limits=(LINE,)), prices=PRICES, compaction=False)
    with standard_pipeline(ScriptedLLM(answering), RecordingChannel(), data_dir=tmp_path, options=opts) as pipeline:
        guard = pipeline.get(ToolLoopSystem).budget
        assert guard is not None
        guard.usage = usage
        ctx = pipeline.build().run_turn_sync(ADA, IncomingMessage("hi"))
        assert guard.holds
    key = LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    assert asyncio.run(usage.spent(key)).tokens == 1_000 and not guard.holds


@pytest.mark.parametrize("lease", [-0.1, 1.0])
def test_a_lease_is_a_share_of_a_limit_from_zero_to_below_one(lease: float) -> None:
    with pytest.raises(ValueError, match="lease"):
        Budgets(limits=(LINE,), lease=lease)


def test_concurrent_calls_topping_up_one_line_each_hold_their_estimate_while_in_flight() -> None:
    """Two calls of one process find the line short at once and top it up from the same reading: each top-up is
    checked again once made, so what the process holds never goes below what its calls in flight reserved."""

    class Yielding(MemoryUsageStore):
        async def reserve(self, charges: Any) -> Charge | None:
            await asyncio.sleep(0)  # the other call reads the line meanwhile
            return await super().reserve(charges)

    usage = Yielding()
    guard = _guard(usage, lease=0.0001)  # a lease of 10 tokens: a call's estimate tops the line up each time
    ctx = make_context("hi", session=ADA)
    key = LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> tuple[int, int]:
        await guard.guarded(ctx, Usage(0, 0), request, "m", _using(20))  # leaves most of its estimate held
        answer = asyncio.Event()

        async def waiting() -> LlmReply:
            await answer.wait()
            return LlmReply("done", usage=Usage(20, 0), model="m")

        calls = [asyncio.create_task(guard.guarded(ctx, Usage(0, 0), request, "m", waiting)) for _ in range(2)]
        for _ in range(20):  # both reserve (a top-up or two each) and wait for their answers
            await asyncio.sleep(0)
        held = guard._held[key].tokens
        answer.set()
        await asyncio.gather(*calls)
        await guard.release()
        return held, (await usage.spent(key)).tokens

    held, released = asyncio.run(scenario())
    assert held >= 0
    assert released == 60


def test_a_line_limiting_tokens_and_cost_leases_each_kind_only_when_that_kind_runs_short() -> None:
    """A cheap model under a token and a cost limit: the token lease runs out often, and each top-up leaves the
    cost held as it is, so the process never holds much more than a lease of either."""
    both = BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=200_000, cost=0.30)
    usage = MemoryUsageStore()
    guard = _guard(usage, both)
    cheap = Prices({"m": ModelPrice(input=0.1, output=0.0)})  # $0.0001 for 1,000 tokens
    guard.prices = cheap
    ctx = make_context("hi", session=ADA)
    key = both.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())

    async def scenario() -> float:
        most = 0.0
        for _ in range(150):
            await guard.guarded(ctx, Usage(0, 0), LlmRequest((ChatMessage.user("hi"),)), "m", _using(1_000))
            most = max(most, guard._held[key].cost)
        return most

    most = asyncio.run(scenario())
    assert most <= 0.30 * 0.01 + 0.001  # a lease of the cost limit and a call's worth, never a lease per token top-up


def test_two_limits_on_one_line_are_refused_with_the_way_to_write_them() -> None:
    with pytest.raises(ValueError, match="give one BudgetLimit with both its tokens and its cost"):
        Budgets(limits=(BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=1_000), BudgetLimit(BudgetScope.TENANT, Period.DAY, cost=1.0)))


def test_settings_chained_on_keep_the_guard_and_its_leases_and_new_budgets_retire_it_for_release(tmp_path: Path) -> None:
    usage = MemoryUsageStore()
    opts = StandardOptions(budgets=Budgets(limits=(LINE,)), prices=PRICES, compaction=False)
    with standard_pipeline(ScriptedLLM(answering), RecordingChannel(), data_dir=tmp_path, options=opts) as pipeline:
        tool_loop = pipeline.get(ToolLoopSystem)
        guard = tool_loop.budget
        assert guard is not None
        guard.usage = usage
        ctx = pipeline.build().run_turn_sync(ADA, IncomingMessage("hi"))
        tool_loop.settings = attrs.evolve(tool_loop.settings, on_tool_execution=lambda execution: None)  # a hook chained on
        assert tool_loop.budget is guard
        tool_loop.settings = attrs.evolve(tool_loop.settings, budgets=Budgets(limits=(LINE,), lease=0.5))
        assert tool_loop.budget is not guard and tool_loop.retired_budgets == [guard]
        asyncio.run(release_budgets(pipeline.systems))
    key = LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now())
    assert asyncio.run(usage.spent(key)).tokens == 1_000 and not guard.holds


def test_a_call_cancelled_while_its_lease_is_reserved_leaves_the_lease_with_the_guard() -> None:
    """The turn is cancelled (its deadline, an interrupt) while the store reserves: the reservation still lands,
    so the guard counts it and gives it back, and the ledger holds nothing that was not used."""

    class Slow(MemoryUsageStore):
        def __init__(self) -> None:
            super().__init__()
            self.go = asyncio.Event()

        async def reserve(self, charges: Any) -> Charge | None:  # as a store's thread does: it goes on when its caller is cancelled
            return await asyncio.shield(self._later(charges))

        async def _later(self, charges: Any) -> Charge | None:
            await self.go.wait()
            return await super().reserve(charges)

    async def scenario() -> Spent:
        usage = Slow()
        guard = _guard(usage)
        ctx = make_context("hi", session=ADA)
        call = asyncio.create_task(guard.guarded(ctx, Usage(0, 0), LlmRequest((ChatMessage.user("hi"),)), "m", _using(300)))
        await asyncio.sleep(0)
        call.cancel()
        usage.go.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(5):  # the reservation finishes on its own
            await asyncio.sleep(0)
        await guard.release()
        return await usage.spent(LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now()))

    assert asyncio.run(scenario()) == Spent(0, 0.0)


def test_an_overrun_the_store_fails_to_write_stays_owed_and_is_written_with_the_next() -> None:
    class FailingOnce(MemoryUsageStore):
        failed = False

        async def spend(self, charges: Any) -> None:
            if not self.failed:
                self.failed = True
                raise ConnectionError("the database is gone")
            await super().spend(charges)

    usage = FailingOnce()
    guard = _guard(usage)
    ctx = make_context("hi", session=ADA)
    request = LlmRequest((ChatMessage.user("hi"),))

    async def scenario() -> Spent:
        with pytest.raises(ConnectionError):
            await guard.guarded(ctx, Usage(0, 0), request, "m", _using(5_000))  # more than the lease holds
        await guard.guarded(ctx, Usage(0, 0), request, "m", _using(300))
        await guard.release()
        return await usage.spent(LINE.key(history_scope(ADA, DEFAULT_COMPANY), ctx.clock.now()))

    assert asyncio.run(scenario()).tokens == 5_300
