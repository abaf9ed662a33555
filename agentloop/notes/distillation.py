"""Distillation: at the end of a successful session, an LLM turns the session's tool
trajectory into a structured Markdown note, stored as a draft `pattern` item."""

from __future__ import annotations

import enum
import json
import re
from time import perf_counter
from typing import TYPE_CHECKING, Any

import attrs

from agentloop._log import get_logger
from agentloop._text import storable
from agentloop.notes.errors import DistillationError
from agentloop.messages import ChatMessage, LlmRequest
from agentloop.notes.models import KnowledgeItem, LayerIds, NoteMetadata, NoteType, Trajectory
from agentloop.ports.clock import Clock, SystemClock
from agentloop.telemetry import TELEMETRY

if TYPE_CHECKING:
    from agentloop.notes.knowledge import KnowledgeBase
    from agentloop.ports.llm import LLM
    from agentloop.ports.metrics import Metrics
    from agentloop.ports.trajectories import TrajectoryStore

DURATION_METRIC = "note_taking.distillation.duration_ms"
TOTAL_METRIC = "note_taking.distillation.total"

SECTIONS: tuple[tuple[str, str], ...] = (
    ("Context", "What problem was being solved?"),
    ("Solution", "What approach worked?"),
    ("Key Patterns", "What reusable patterns emerged?"),
    ("Code Examples", "Relevant code snippets (if applicable)"),
    ("Tags", "Suggested categorization tags"),
)
"""The five sections every distilled note has, with the question each answers."""

REQUIRED_SECTIONS = ("Context", "Solution", "Key Patterns")

INSTRUCTIONS = (
    "You distill an AI agent's tool-use trajectory into a short, reusable note that will "
    "be shown to the agent in later sessions. Answer in Markdown with exactly these "
    "sections, in this order:\n\n"
    + "\n".join(f"## {title}\n{question}" for title, question in SECTIONS)
    + "\n\nWrite 'None' under Code Examples when no code applies. Under Tags give a "
    "comma-separated list of lower-case tags."
)


@attrs.frozen
class DistilledNote:
    """A parsed distillation reply: the five sections of a note."""

    context: str
    solution: str
    key_patterns: str
    code_examples: str | None
    tags: tuple[str, ...]

    @property
    def title(self) -> str:
        """The first line of the context, cut to 80 characters."""
        first = self.context.strip().splitlines()[0].strip()
        return first if len(first) <= 80 else first[:77] + "..."

    def to_markdown(self) -> str:
        parts = [
            f"## Context\n{self.context}",
            f"## Solution\n{self.solution}",
            f"## Key Patterns\n{self.key_patterns}",
        ]
        if self.code_examples:
            parts.append(f"## Code Examples\n{self.code_examples}")
        if self.tags:
            parts.append(f"## Tags\n{', '.join(self.tags)}")
        return "\n\n".join(parts) + "\n"


_HEADING = re.compile(r"^#{1,3}\s*(.+?)\s*:?\s*$", re.MULTILINE)
_NONE = {"", "none", "n/a", "-", "not applicable"}


_FENCE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)


def _fenced_spans(reply: str) -> list[tuple[int, int]]:
    """Character spans of fenced code blocks, whose `#` lines are code, not headings."""
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for fence in _FENCE.finditer(reply):
        if opened is None:
            opened = fence.start()
        else:
            spans.append((opened, fence.end()))
            opened = None
    if opened is not None:
        spans.append((opened, len(reply)))
    return spans


def parse_note(reply: str) -> DistilledNote:
    """Split a reply into its sections; `DistillationError` if a required one is empty."""
    sections: dict[str, str] = {}
    fenced = _fenced_spans(reply)
    matches = [m for m in _HEADING.finditer(reply) if not any(a <= m.start() < b for a, b in fenced)]
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(reply)
        sections[match.group(1).strip().lower()] = reply[match.end() : end].strip()
    missing = [name for name in REQUIRED_SECTIONS if not sections.get(name.lower())]
    if missing:
        raise DistillationError(
            f"the distillation reply lacks the section(s) {', '.join(missing)}; the model must "
            f"answer with '## Context', '## Solution' and '## Key Patterns' headings"
        )
    code = sections.get("code examples", "")
    tags = tuple(
        tag.strip().strip("#`").lower()
        for tag in re.split(r"[,\n]", sections.get("tags", ""))
        if tag.strip().strip("#`-* ")
    )
    return DistilledNote(
        context=sections["context"],
        solution=sections["solution"],
        key_patterns=sections["key patterns"],
        code_examples=None if code.lower() in _NONE else code,
        tags=tuple(dict.fromkeys(tag.lstrip("-* ") for tag in tags)),
    )


def _clip(text: str | None, limit: int) -> str:
    if text is None:
        return "-"
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def build_prompt(trajectory: Trajectory, *, model: str | None = None, max_output_chars: int = 2000) -> LlmRequest:
    """The structured distillation request: instructions plus the trajectory, step by step,
    saying which steps one model reply asked for together and which ran inside another."""
    position = {e.id: i + 1 for i, e in enumerate(trajectory.executions)}
    together: dict[str, list[int]] = {}
    for number, execution in enumerate(trajectory.executions, start=1):
        if execution.step_id is not None:
            together.setdefault(execution.step_id, []).append(number)
    steps = []
    for number, execution in enumerate(trajectory.executions, start=1):
        lines = [f"### Step {number}: {execution.tool_name}"]
        if execution.parent_id in position:
            lines.append(f"Ran inside step {position[execution.parent_id]}")
        siblings = [n for n in together.get(execution.step_id or "", ()) if n != number]
        if siblings:
            lines.append(f"Asked for in one model reply together with step {', '.join(map(str, siblings))}")
        lines.append(f"Arguments: {json.dumps(execution.arguments, sort_keys=True, default=str)}")
        lines.append(f"Duration: {execution.duration_ms:.0f} ms")
        if execution.error is not None:
            lines.append(f"Error: {_clip(execution.error, max_output_chars)}")
        else:
            lines.append(f"Result: {_clip(execution.result, max_output_chars)}")
        if execution.context_snapshot:
            snapshot = "; ".join(f"{k}={_clip(v, 200)}" for k, v in sorted(execution.context_snapshot.items()))
            lines.append(f"Context: {snapshot}")
        steps.append("\n".join(lines))
    body = (
        f"The session succeeded after {len(trajectory.executions)} tool calls over "
        f"{trajectory.duration_s:.0f} seconds.\n\n" + "\n\n".join(steps)
    )
    return LlmRequest(messages=(ChatMessage.system(INSTRUCTIONS), ChatMessage.user(body)), model=model, temperature=0.0)


class DistillationStatus(enum.Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    SKIPPED = "skipped"
    FAILED = "failed"

    @property
    def metric_label(self) -> str:
        """The `status` label of the distillation metric: success, skip or error."""
        if self is DistillationStatus.SKIPPED:
            return "skip"
        if self is DistillationStatus.FAILED:
            return "error"
        return "success"


@attrs.frozen
class DistillationResult:
    """What end-of-session distillation did; `note` is the stored or matched item."""

    status: DistillationStatus
    reason: str
    trajectory_hash: str
    note: KnowledgeItem | None = None


@attrs.frozen
class DistillationSettings:
    """When a session is not worth distilling (fewer than 3 executions, or under 30 s) and the dedup bar."""

    min_executions: int = 3
    min_duration_s: float = 30.0
    duplicate_above: float = 0.95
    model: str | None = None
    max_output_chars: int = 2000


class Distiller:
    """Turns one session's trajectory into a draft `pattern` note, or says why not."""

    def __init__(
        self,
        llm: LLM,
        knowledge: KnowledgeBase,
        trajectories: TrajectoryStore,
        *,
        settings: DistillationSettings | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        logger: Any = None,
    ) -> None:
        self.llm = llm
        self.knowledge = knowledge
        self.trajectories = trajectories
        self.settings = settings or DistillationSettings()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self._log = logger if logger is not None else get_logger("agentloop.notes.distillation")

    async def skip_reason(self, trajectory: Trajectory, *, success: bool, owner: LayerIds) -> str | None:
        """Why this trajectory is not worth distilling for `owner`, or None when it is."""
        settings = self.settings
        count = len(trajectory.executions)
        if not success:
            return "the session did not end successfully"
        if count < settings.min_executions:
            return f"the trajectory has {count} tool executions, fewer than {settings.min_executions}"
        if trajectory.duration_s < settings.min_duration_s:
            return f"the trajectory lasted {trajectory.duration_s:.1f} s, less than {settings.min_duration_s:g} s"
        # The earlier release marked a trajectory by its bare content hash, for any chain.
        if await self.trajectories.is_distilled(trajectory.distilled_key(owner)) or await self.trajectories.is_distilled(
            trajectory.content_hash
        ):
            return "a trajectory with this content hash was already distilled for this chain"
        return None

    async def distill(
        self, trajectory: Trajectory, *, success: bool, owner: LayerIds, user_id: str | None = None
    ) -> DistillationResult:
        """Distill `trajectory` into a note owned by `owner` (its narrowest layer).

        Emits `note_taking.distillation.duration_ms` and `note_taking.distillation.total`
        with status success, skip or error; never raises for a bad reply or LLM failure.
        """
        started = perf_counter()
        log = self._log.bind(session_id=trajectory.session_id, trajectory_hash=trajectory.content_hash[:16])
        reason = await self.skip_reason(trajectory, success=success, owner=owner)
        if reason is not None:
            log.info("distillation.skipped", reason=reason)
            result = DistillationResult(DistillationStatus.SKIPPED, reason, trajectory.content_hash)
        else:
            try:
                result = await self._distill(trajectory, owner, user_id, log)
            except Exception as exc:
                log.warning("distillation.failed", error=f"{type(exc).__name__}: {exc}")
                result = DistillationResult(
                    DistillationStatus.FAILED, f"{type(exc).__name__}: {exc}", trajectory.content_hash
                )
        return self.report(result, (perf_counter() - started) * 1000.0)

    def report(self, result: DistillationResult, duration_ms: float) -> DistillationResult:
        """Emit the distillation metrics (docs/notes.md) for a finished attempt; returns it."""
        metrics = TELEMETRY.metrics_for(self.metrics)
        if metrics is not None:
            metrics.observe(DURATION_METRIC, duration_ms)
            metrics.increment(TOTAL_METRIC, labels={"status": result.status.metric_label})
        return result

    async def _distill(
        self, trajectory: Trajectory, owner: LayerIds, user_id: str | None, log: Any
    ) -> DistillationResult:
        settings = self.settings
        request = build_prompt(trajectory, model=settings.model, max_output_chars=settings.max_output_chars)
        reply = await self.llm.complete(request)
        note = parse_note(storable(reply.content or ""))  # model output may hold bytes no store takes
        markdown = note.to_markdown()
        vector = await self.knowledge.aembed(markdown)
        layer = owner.narrowest()
        now = self.clock.now()
        duplicate = await self.knowledge.find_duplicate(vector, owner=owner, above=settings.duplicate_above)
        if duplicate is not None:
            existing, similarity = duplicate
            updated = await self.knowledge.add_reference(existing.key)
            await self.trajectories.mark_distilled(trajectory.distilled_key(owner), trajectory.session_id, existing.key, now)
            log.info("distillation.duplicate", note_id=existing.key, similarity=round(similarity, 4))
            return DistillationResult(
                DistillationStatus.DUPLICATE,
                f"note {existing.key} is {similarity:.3f} similar; its reference count went up",
                trajectory.content_hash,
                updated,
            )
        metadata = NoteMetadata(
            source_trajectory_id=trajectory.id,
            distillation_timestamp=now,
            llm_model_used=reply.model or request.model,
            session_id=trajectory.session_id,
            user_id=user_id if user_id is not None else trajectory.user_id,
            project_id=owner.project_id if owner.project_id is not None else trajectory.project_id,
            tags=note.tags,
        )
        item = KnowledgeItem(
            type=NoteType.PATTERN,
            layer=layer,
            layer_ids=owner.truncated(layer),
            title=note.title,
            markdown=markdown,
            embedding=vector,
            created_at=now,
            metadata=metadata,
        )
        stored = await self.knowledge.add(item)
        await self.trajectories.mark_distilled(trajectory.distilled_key(owner), trajectory.session_id, stored.key, now)
        log.info("distillation.stored", note_id=stored.key, layer=layer.value, tags=list(note.tags))
        return DistillationResult(DistillationStatus.STORED, "stored as a draft pattern", trajectory.content_hash, stored)
