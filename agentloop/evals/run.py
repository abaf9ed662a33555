"""Running one conversation of an eval on a bot: its seeds, its turns, and what they cost.

`run_conversation` is the one place a case meets a bot; evaluations, the pytest steps and the
learning curve all call it, and read the typed `Conversation` it returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

import attrs

from agentloop.components import StructuredOutput, ToolExecutions, TurnUsage
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.evals.dataset import Seeds
from agentloop.evals.spans import RecordedSpan, case_spans
from agentloop.loop import AgentLoop
from agentloop.messages import Usage
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType, RetrievedNotes
from agentloop.outcome import FinishReason
from agentloop.ports.stores import MemoryEntry, Stores
from agentloop.pricing import Prices
from agentloop.scopes import DEFAULT_COMPANY, knowledge_scope, memory_scope

__all__ = ["Conversation", "LlmCall", "ToolCall", "TurnResult", "case_session", "run_conversation", "seed"]


@attrs.frozen
class ToolCall:
    """A tool the conversation ran: its name, the arguments the model gave, its error if it failed, and its turn (from 0)."""

    name: str
    arguments: dict[str, Any] = attrs.field(hash=False)
    turn: int
    error: str | None = None


@attrs.frozen
class LlmCall:
    """A model call of the conversation, from its span: the model, how long it took, its tokens when reported."""

    model: str | None
    latency_ms: float
    turn: int
    input_tokens: int | None = None
    output_tokens: int | None = None


@attrs.frozen
class TurnResult:
    """One turn: what the user said, the answer, how the turn ended, its wall time, its failures,
    and the titles of the notes it was shown."""

    user_text: str
    answer: str | None
    finish_reason: FinishReason
    latency_s: float
    failures: tuple[str, ...] = ()
    notes_shown: tuple[str, ...] = ()


@attrs.frozen
class Conversation:
    """A finished conversation: its turns, tool and model calls, tokens, cost (None when a model
    has no known price), wall time, span tree, and the structured output of its last turn."""

    session: Session
    turns: tuple[TurnResult, ...]
    tool_calls: tuple[ToolCall, ...]
    llm_calls: tuple[LlmCall, ...]
    usage: Usage
    cost: float | None
    latency_s: float
    spans: tuple[RecordedSpan, ...] = ()
    structured: Any = attrs.field(default=None, eq=False)
    contexts: tuple[AgentContext, ...] = attrs.field(default=(), eq=False, repr=False)
    """The finished turn contexts, for a caller that wants a component the result does not copy."""

    @property
    def answer(self) -> str | None:
        """The last turn's answer."""
        return self.turns[-1].answer if self.turns else None

    @property
    def finish_reason(self) -> FinishReason | None:
        return self.turns[-1].finish_reason if self.turns else None

    @property
    def tokens(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens

    def transcript(self) -> list[tuple[str, str]]:
        """The conversation as (speaker, text) lines: user, tool calls with their results' errors, assistant."""
        lines: list[tuple[str, str]] = []
        for index, turn in enumerate(self.turns):
            lines.append(("user", turn.user_text))
            for call in (c for c in self.tool_calls if c.turn == index):
                said = f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
                lines.append(("tool", said + (f" failed: {call.error}" if call.error else "")))
            lines.append(("assistant", turn.answer if turn.answer is not None else f"(no answer: {turn.finish_reason.value})"))
        return lines


def case_session(case: str, run: int = 1, *, user: str = "eval-user") -> Session:
    """A fresh session in a tenant chain of its own (org and project unique to this run of `case`),
    so nothing one case stores or seeds reaches another."""
    unique = uuid.uuid4().hex[:12]
    return Session(f"eval-{unique}", user_id=user, org_id=f"eval-{unique}", team_id="eval", project_id=f"{case}#{run}")


async def seed(stores: Stores, session: Session, seeds: Seeds, *, company_id: str = DEFAULT_COMPANY) -> None:
    """Put the case's notes (accepted, at the session's project), RAG texts and memory in the
    session's tenant chain, through the store ports."""
    now = datetime.now(UTC)
    owner = LayerIds.of_session(session, company_id)
    for text in seeds.notes:
        vector = (await stores.embedder.aembed([text]))[0]
        title = next((line.strip("# ").strip() for line in text.splitlines() if line.strip()), "note")
        item = KnowledgeItem(NoteType.PATTERN, owner.narrowest(), owner, title, text, vector, now, status=NoteStatus.ACCEPTED)
        await stores.knowledge.add(item)
    for text in seeds.rag:
        await stores.rag.add(knowledge_scope(session, company_id), text, session_id=f"{session.id}-seed")
    for exchange in seeds.memory:
        entry = MemoryEntry(memory_scope(session, company_id), f"{session.id}-seed", exchange.user, exchange.assistant, now)
        await stores.memory.add(entry)


async def run_conversation(
    loop: AgentLoop,
    messages: Sequence[str],
    *,
    session: Session,
    name: str = "conversation",
    stores: Stores | None = None,
    seeds: Seeds | None = None,
    prices: Prices | None = None,
    company_id: str = DEFAULT_COMPANY,
) -> Conversation:
    """Seed the session's tenant (needs `stores`), then say each message in turn on `loop`, inside
    a span `eval case NAME`; returns what the turns did and cost."""
    if seeds is not None and (seeds.notes or seeds.rag or seeds.memory):
        if stores is None:
            raise ValueError(f"{name}: seeding notes, RAG texts or memory needs the bot's stores")
        await seed(stores, session, seeds, company_id=company_id)
    contexts: list[AgentContext] = []
    latencies: list[float] = []
    attributes = {"agentloop.eval.case": name, "session.id": session.id}
    with case_spans(f"eval case {name}", attributes) as spans:
        for text in messages:
            started = perf_counter()
            contexts.append(await loop.run_turn(session, IncomingMessage(text)))
            latencies.append(perf_counter() - started)
    return _conversation(session, messages, contexts, latencies, tuple(spans), prices or Prices())


def _conversation(
    session: Session, messages: Sequence[str], contexts: list[AgentContext], latencies: list[float],
    spans: tuple[RecordedSpan, ...], prices: Prices,
) -> Conversation:
    turns, tool_calls = [], []
    usage, cost, priced = Usage(0, 0), 0.0, True
    for index, (text, ctx, latency) in enumerate(zip(messages, contexts, latencies, strict=True)):
        outcome = ctx.turn_outcome
        retrieved = ctx.get(RetrievedNotes)
        turns.append(TurnResult(
            text,
            None if outcome is None else outcome.assistant_text,
            FinishReason.ERROR if outcome is None else outcome.finish_reason,
            latency,
            tuple(f"{f.source.value} {f.component}: {f.message}" for f in ctx.failures),
            () if retrieved is None else tuple(note.item.title for note in retrieved.notes),
        ))
        executions = ctx.get(ToolExecutions)
        for execution in () if executions is None else executions.executions:
            tool_calls.append(ToolCall(execution.tool_name, dict(execution.arguments), index, execution.error))
        for call in (ctx.get(TurnUsage) or TurnUsage()).calls:
            usage += call.usage
            call_cost = prices.cost(call.model, call.usage)
            priced = priced and call_cost is not None
            cost += call_cost or 0.0
    structured = contexts[-1].get(StructuredOutput) if contexts else None
    return Conversation(
        session, tuple(turns), tuple(tool_calls), _llm_calls(spans), usage, cost if priced else None, sum(latencies),
        spans, None if structured is None else structured.value, tuple(contexts),
    )


def _llm_calls(spans: tuple[RecordedSpan, ...]) -> tuple[LlmCall, ...]:
    """The model calls among a case's spans, each with the turn (counted from 0) it was made in."""
    turn_of: dict[int, int] = {}
    calls: list[LlmCall] = []
    for index, span in enumerate(spans):
        if span.name == "turn":
            turn_of[index] = len(turn_of)
        if span.attributes.get("gen_ai.operation.name") != "chat":
            continue
        turn, parent = 0, span.parent
        while parent is not None:
            if parent in turn_of:
                turn = turn_of[parent]
                break
            parent = spans[parent].parent
        model = span.attributes.get("gen_ai.response.model", span.attributes.get("gen_ai.request.model"))
        tokens_in, tokens_out = span.attributes.get("gen_ai.usage.input_tokens"), span.attributes.get("gen_ai.usage.output_tokens")
        calls.append(LlmCall(
            None if model is None else str(model), float(span.attributes.get("agentloop.llm.latency_ms", span.duration_ms)), turn,
            tokens_in if isinstance(tokens_in, int) else None, tokens_out if isinstance(tokens_out, int) else None,
        ))
    return tuple(calls)
