"""The typed components the standard pipeline's systems pass to each other.

Each is written by one system and read by later ones (docs/pipeline.md); a
custom system that wants to take part in the standard turn reads or writes these.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from agentloop.messages import ChatMessage, Role, ToolCall, ToolSpec, Usage
from agentloop.outcome import Attachment, FailureEvent, FailureKind, FinishReason, TurnOutcome
from agentloop.scopes import DEFAULT_COMPANY

if TYPE_CHECKING:
    from agentloop.context import AgentContext
    from agentloop.ports.inbox import DeliveryLedger
    from agentloop.ports.channel import MessageStream


@attrs.frozen
class SanitizedInput:
    """The user's message after cleaning; `truncated` says if it was cut."""

    text: str
    attachments: tuple[Attachment, ...] = ()
    truncated: bool = False


@attrs.frozen
class PromptSection:
    """A block of extra context for the model (memory, documents, notes, task notes)."""

    title: str
    body: str
    source: str


@attrs.frozen
class PromptContext:
    """Everything the model will be shown this turn."""

    system_prompt: str
    messages: tuple[ChatMessage, ...]
    sections: tuple[PromptSection, ...] = ()
    tools: tuple[ToolSpec, ...] = ()

    def with_section(self, section: PromptSection) -> PromptContext:
        return attrs.evolve(self, sections=(*self.sections, section))

    def render_system(self) -> str:
        """The system prompt followed by each section as a Markdown heading and body."""
        parts = [self.system_prompt] + [f"## {s.title}\n{s.body}" for s in self.sections]
        return "\n\n".join(part for part in parts if part)

    def to_messages(self) -> tuple[ChatMessage, ...]:
        system = self.render_system()
        head = (ChatMessage(Role.SYSTEM, system),) if system else ()
        return head + self.messages


@attrs.frozen
class LlmResponse:
    """The model's final answer for the turn; `usage` adds up the tokens of all its model calls."""

    text: str
    model: str | None = None
    voice_text: str | None = None
    attachments: tuple[Attachment, ...] = ()
    usage: Usage | None = None


@attrs.frozen
class CallUsage:
    """The tokens of one model call, and the model that answered it (the one asked for when the
    server did not say; None when neither is known)."""

    model: str | None
    usage: Usage


@attrs.frozen
class TurnUsage:
    """Every model call of the turn that reported its usage, in call order, whether or not the
    turn was answered; `total` adds them up (what `LlmResponse.usage` holds for an answered turn)."""

    calls: tuple[CallUsage, ...] = ()

    @property
    def total(self) -> Usage:
        total = Usage(0, 0)
        for call in self.calls:
            total += call.usage
        return total

    def add(self, call: CallUsage) -> TurnUsage:
        return TurnUsage((*self.calls, call))


@attrs.frozen
class StructuredOutput:
    """The model's final answer validated into the tool loop's `output_type` (an attrs class, a
    dataclass or any type pydantic validates); `LlmResponse.text` holds the JSON it came as."""

    value: Any


@attrs.frozen
class StreamedText:
    """What the tool loop streamed to the user's message `message_id` while the model wrote it.

    A provisional delivery, never stored: `complete` says the model's stream ended normally
    (False while it runs and when it was cut). `stream` is the open message, which routing
    closes with the canonical answer or aborts before a fallback.
    """

    message_id: str
    text: str
    complete: bool
    stream: MessageStream | None = attrs.field(default=None, repr=False)


@attrs.frozen
class LlmFailure:
    """The model could not answer; `kind` drives the finish reason and fallback."""

    kind: FailureKind
    message: str
    model: str | None = None


@attrs.frozen
class ToolLoopStop:
    """Why the tool loop stopped early (limits, deadline, policy, plan mode)."""

    reason: FinishReason
    detail: str
    llm_calls: int = 0
    tool_executions: int = 0


@attrs.frozen
class PlanProposal:
    """In plan mode: the tool calls the model wanted to make, none of them run."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()


@attrs.frozen
class ToolExecution:
    """One finished tool call, as captured for trajectories.

    `step_id` is the model step that asked for it (calls asked for together share it);
    `parent_id` is the execution it ran inside (a tool that ran a turn), None at the top.
    The tenant chain (company, org, team, project, user) decides who may read it; note-taking
    sets the company, which the session does not know.
    """

    id: str
    tool_name: str
    arguments: dict[str, Any] = attrs.field(hash=False)
    started_at: datetime
    duration_ms: float
    session_id: str
    result: str | None = None
    error: str | None = None
    parent_id: str | None = None
    user_id: str | None = None
    project_id: str | None = None
    context_snapshot: dict[str, str] = attrs.field(factory=dict, hash=False)
    org_id: str | None = None
    team_id: str | None = None
    step_id: str | None = None
    company_id: str = DEFAULT_COMPANY

    @property
    def succeeded(self) -> bool:
        return self.error is None


@attrs.frozen
class ToolExecutions:
    """Every tool execution of the turn, in the order they finished."""

    executions: tuple[ToolExecution, ...] = ()


@attrs.frozen
class TurnPolicy:
    """How a turn that is not a user's conversation (a task step, a scheduled job) wants
    to be treated; supply it as a turn input. A turn without one is a conversation turn.

    `fresh_retrieval`: retrieval systems may add memory, earlier answers and notes.
    `persist`: the turn belongs to the session's conversation, so its exchange is stored
    as history and memory and the stored history is shown to it; False for neither.
    """

    fresh_retrieval: bool = True
    persist: bool = True

    @staticmethod
    def of(ctx: AgentContext) -> TurnPolicy:
        """The turn's policy; a turn that supplies none is a conversation turn (the defaults).

        It reads `TurnPolicy` from `ctx`, so a system calling it declares it in `optional_reads`.
        """
        return ctx.get(TurnPolicy) or _CONVERSATION


_CONVERSATION = TurnPolicy()


@attrs.frozen
class InboxTurn:
    """A turn a worker runs for one message of a durable inbox; supplied as a turn input.

    The message id keys the history append and the reply, so a turn run again after its
    worker was lost writes its history once and sends its reply at most once; `attempt`
    counts the runs of this message, 1 the first time. `last_run` says no run follows.
    """

    message_id: str
    attempt: int
    deliveries: DeliveryLedger = attrs.field(eq=False, repr=False)
    last_run: bool = False

    def runs_again(self, outcome: TurnOutcome, failures: Iterable[FailureEvent]) -> bool:
        """Whether the turn is held back for another run, its fallback answer neither sent nor
        stored: a store it needed could not be reached (an outage may end before the next run),
        nothing was delivered yet and a run follows."""
        return (
            not self.last_run and outcome.fallback and outcome.routing_outcome is None
            and any(f.kind is FailureKind.UNAVAILABLE for f in failures)
        )
