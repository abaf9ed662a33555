"""A prompt within a token budget: how the context window is shared, what of history fits, and
how older turns are folded into a session's summary (compaction).

The window less the answer's reserve is the prompt's. The system prompt, the tool specs and
the user's current message are always sent, counted as they are; notes, the summary, memory
and RAG each get at most their share; history gets the rest, newest turns first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from agentloop.components import PromptSection
from agentloop.messages import ChatMessage, LlmRequest, Role
from agentloop.tokens import MESSAGE_OVERHEAD, TokenCounter, message_tokens

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_TITLE",
    "ContextBudget",
    "UnsummarisedHistory",
    "chunks",
    "fitting_tail",
    "render_turns",
    "section_tokens",
    "summary_request",
    "tail_start",
    "trim_section",
    "turn_starts",
]

SUMMARY_TITLE = "Earlier in this conversation"
SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a long conversation between a user and an assistant. Rewrite the previous "
    "summary with the new turns folded in. Keep every fact, name, number, preference, decision and open "
    "question from the previous summary unless a new turn corrects it, and add those of the new turns; "
    "drop greetings and repetition. Write short plain sentences, nothing else."
)


def _share(value: float) -> float:
    if not 0 <= value < 1:
        raise ValueError(f"a share of the prompt is a fraction from 0 up to 1, got {value}")
    return value


@attrs.frozen
class ContextBudget:
    """How many tokens a turn's prompt may take and how they are shared.

    `window` is the model's context window and `answer_reserve` what is kept free for the
    answer; the shares are fractions of the rest (the prompt): at most that much for notes,
    the session's summary, memory and RAG. `message` is what compaction sets aside for a
    user's next message, and `keep` the fraction of history's room that compaction leaves
    unsummarised, so it runs once every few turns rather than every turn.
    """

    window: int = 32_768
    answer_reserve: int = 4_096
    notes: float = attrs.field(default=0.10, converter=_share)
    summary: float = attrs.field(default=0.10, converter=_share)
    memory: float = attrs.field(default=0.10, converter=_share)
    rag: float = attrs.field(default=0.10, converter=_share)
    message: float = attrs.field(default=0.05, converter=_share)
    keep: float = attrs.field(default=0.5, converter=_share)

    def __attrs_post_init__(self) -> None:
        if self.answer_reserve < 0 or self.window <= self.answer_reserve:
            raise ValueError(
                f"the context window ({self.window} tokens) must be larger than the answer's reserve ({self.answer_reserve})"
            )
        if self.notes + self.summary + self.memory + self.rag + self.message >= 1:
            raise ValueError("the shares of notes, summary, memory, RAG and the message must leave some of the prompt to history")

    @classmethod
    def for_window(cls, window: int | None) -> ContextBudget:
        """The default budget for a model of `window` tokens (None: not known), its answer's reserve at most
        a quarter of it: a window larger than the default one (32,768) is capped to it, as history that
        grows to a 200k window before compaction costs every turn; configure a larger budget to use more."""
        default = cls()
        if window is None or window >= default.window:
            return default
        return cls(window=window, answer_reserve=min(default.answer_reserve, window // 4))

    @property
    def prompt(self) -> int:
        """Tokens the prompt may take: the window less the answer's reserve."""
        return self.window - self.answer_reserve

    def share(self, fraction: float) -> int:
        """`fraction` of the prompt, in tokens."""
        return int(self.prompt * fraction)

    def history_floor(self, fixed: int) -> int:
        """The room history has in any turn whose system prompt and tools take `fixed` tokens: what
        is left when every share is full and the next message takes its share (compaction keeps
        the unsummarised history within it, so the next turn never cuts it)."""
        taken = self.share(self.notes + self.summary + self.memory + self.rag + self.message)
        return max(0, self.prompt - fixed - MESSAGE_OVERHEAD - taken)


@attrs.frozen
class UnsummarisedHistory:
    """What context building read of a session's history after its summary, before this turn's
    exchange: `messages` messages of `tokens` tokens (by its counter), and whether that is all
    of them (`complete`: fewer than `history_window`, so the read cut nothing). Compaction
    decides from it whether it has anything to fold without reading the stores."""

    messages: int
    tokens: int
    complete: bool


def section_tokens(counter: TokenCounter, section: PromptSection, model: str | None = None) -> int:
    """A section's tokens as the system message renders it (heading, body and separator)."""
    return counter.count(f"\n\n## {section.title}\n{section.body}", model)


def trim_section(counter: TokenCounter, section: PromptSection, room: int, model: str | None = None) -> PromptSection | None:
    """`section` with lines cut from its end until it fits `room` tokens; None if not even one line fits."""
    if section_tokens(counter, section, model) <= room:
        return section
    lines = section.body.split("\n")
    while lines:
        trimmed = attrs.evolve(section, body="\n".join(lines))
        if section_tokens(counter, trimmed, model) <= room:
            return trimmed
        lines.pop()
    return None


def turn_starts(messages: Sequence[ChatMessage]) -> list[int]:
    """The indexes where a user's turn starts (a user message): history is cut only there, so a
    tool result never loses the call that asked for it."""
    return [i for i, m in enumerate(messages) if m.role is Role.USER]


def fitting_tail(
    counter: TokenCounter, messages: Sequence[ChatMessage], room: int, *, limit: int | None = None, model: str | None = None
) -> int:
    """Where the newest whole turns of `messages` that fit `room` tokens (and `limit` messages) start."""
    return tail_start(messages, [message_tokens(counter, m, model) for m in messages], room, limit=limit)


def tail_start(messages: Sequence[ChatMessage], sizes: Sequence[int], room: int, *, limit: int | None = None) -> int:
    """`fitting_tail` for messages already counted (`sizes[i]` tokens for `messages[i]`)."""
    best, total, start = len(messages), 0, len(messages)
    for begin in reversed(turn_starts(messages)):
        total += sum(sizes[begin:start])
        start = begin
        if total > room or (limit is not None and len(messages) - begin > limit):
            break
        best = begin
    return best


def summary_request(
    previous: str | None, turns: Sequence[ChatMessage], *, max_tokens: int, model: str | None = None
) -> LlmRequest:
    """Ask a model for the summary of `previous` with `turns` folded in, in at most `max_tokens`."""
    body = f"Previous summary:\n{previous or '(none yet)'}\n\nTurns to fold in:\n{render_turns(turns)}"
    return LlmRequest(
        (ChatMessage.system(SUMMARY_INSTRUCTIONS), ChatMessage.user(body)), model=model, max_tokens=max_tokens,
    )


def render_turns(turns: Sequence[ChatMessage]) -> str:
    """The turns as lines a summariser reads: who spoke and what (tool calls by name)."""
    lines = []
    for m in turns:
        calls = ", ".join(call.name for call in m.tool_calls)
        said = m.content or ""
        if calls:
            said = f"{said} [called {calls}]".strip()
        lines.append(f"{m.role.value.capitalize()}: {said}")
    return "\n".join(lines)


def chunks(counter: TokenCounter, turns: Sequence[ChatMessage], room: int, model: str | None = None) -> Iterator[tuple[ChatMessage, ...]]:
    """`turns` in consecutive runs of whole turns, each within `room` tokens where a turn allows
    (a single turn larger than `room` is a run of its own)."""
    starts = [*turn_starts(turns), len(turns)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    run_start, size = 0, 0
    for begin, end in zip(starts, starts[1:]):
        turn_size = sum(message_tokens(counter, m, model) for m in turns[begin:end])
        if size and size + turn_size > room:
            yield tuple(turns[run_start:begin])
            run_start, size = begin, 0
        size += turn_size
    if run_start < len(turns):
        yield tuple(turns[run_start:])
