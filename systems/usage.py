"""Usage accounting: the turn's model calls priced and stored, and the GenAI telemetry of one call."""

from __future__ import annotations

import functools
import hashlib
from typing import ClassVar

from agentloop import DEFAULT_COMPANY, AgentContext, Prices, Session, System, TurnUsage, Usage, history_scope
from agentloop.ports import Metrics, RecordedCall, UsageRecord, UsageStore

CACHE_KEYS_KEPT = 4096
"""Sessions whose prompt cache key is remembered, the most recently asked: each turn asks its session's."""


class UsageRecordingSystem(System):
    """Stores the turn's `TurnUsage` (order 72, always_run): each model call with its model and
    its cost from `prices` (None when the price is unknown), in the session's history scope
    within `company_id`, keyed by the turn id so a write tried again records the turn once.

    It runs for every turn that called the model: answered or not, a task step, a turn past
    its deadline; the tokens were spent all the same. A child session's turn (a bot asked as a
    tool, `Session.parent_id`) is not recorded here: its calls join the asking turn's `TurnUsage`.
    """

    order: ClassVar[int] = 72
    optional_reads = (TurnUsage,)
    always_run = True

    def __init__(self, usage: UsageStore, *, prices: Prices | None = None, company_id: str = DEFAULT_COMPANY) -> None:
        self.usage = usage
        self.prices = prices or Prices()
        self.company_id = company_id

    def should_process(self, ctx: AgentContext) -> bool:
        turn = ctx.get(TurnUsage)
        return turn is not None and bool(turn.calls) and ctx.session.parent_id is None

    async def process(self, ctx: AgentContext) -> None:
        turn = ctx.require(TurnUsage)
        calls = tuple(RecordedCall(call.model, call.usage, self.prices.cost(call.model, call.usage)) for call in turn.calls)
        scope = history_scope(ctx.session, self.company_id)
        await self.usage.record(UsageRecord(ctx.turn_id, scope, ctx.clock.now(), calls))


def prompt_cache_key(ctx: AgentContext, company_id: str) -> str:
    """The key a session's model requests share (`LlmRequest.cache_key`): a digest of its history
    scope, so the turns of one session meet one prompt cache and no id is sent to the provider."""
    return _session_digest(ctx.session, company_id)


@functools.lru_cache(maxsize=CACHE_KEYS_KEPT)
def _session_digest(session: Session, company_id: str) -> str:
    return hashlib.sha256(history_scope(session, company_id).key.encode()).hexdigest()[:32]


def usage_attributes(usage: Usage) -> dict[str, int]:
    """A model call's usage as the OpenTelemetry GenAI span attributes (input tokens include cached ones)."""
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
    }


def count_tokens(metrics: Metrics, usage: Usage, model: str, asked: str | None) -> None:
    """agentloop's token counters (labelled by model) and the GenAI `gen_ai.client.token.usage` histogram."""
    labels = {"model": model}
    metrics.increment("agentloop.llm.input_tokens", usage.input_tokens, labels)
    metrics.increment("agentloop.llm.output_tokens", usage.output_tokens, labels)
    if usage.cache_read_tokens:
        metrics.increment("agentloop.llm.cache_read_tokens", usage.cache_read_tokens, labels)
    if usage.cache_write_tokens:
        metrics.increment("agentloop.llm.cache_write_tokens", usage.cache_write_tokens, labels)
    semconv = {"gen_ai.operation.name": "chat", "gen_ai.response.model": model} | ({"gen_ai.request.model": asked} if asked else {})
    metrics.observe("gen_ai.client.token.usage", usage.input_tokens, semconv | {"gen_ai.token.type": "input"})
    metrics.observe("gen_ai.client.token.usage", usage.output_tokens, semconv | {"gen_ai.token.type": "output"})


