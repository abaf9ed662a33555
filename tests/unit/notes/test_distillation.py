"""Distillation: the prompt, parsing the reply, skip rules, failures and dedup."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentloop import LlmReply, LlmRequest
from agentloop.adapters import InMemoryMetrics, open_stores
from agentloop.errors import LlmCallError
from agentloop.notes.errors import DistillationError
from agentloop.notes import (
    INSTRUCTIONS,
    DistillationSettings,
    DistillationStatus,
    Distiller,
    KnowledgeBase,
    Layer,
    LayerIds,
    Trajectory,
    build_prompt,
    parse_note,
)
from agentloop.outcome import FailureKind
from agentloop.ports import TrajectoryStore
from agentloop.testing import FakeClock
from agentloop.testing.notes import make_execution, make_executions

REPLY = """Here is the note.

## Context
Users could not log in after the password reset.

## Solution
Invalidate the old session tokens when the password changes.

## Key Patterns
Tie session validity to a credentials version.

## Code Examples
None

## Tags
auth, sessions, #security
"""


class Model:
    """A distilling model for these tests: a fixed reply, or an exception."""

    def __init__(self, reply: str | BaseException = REPLY, model: str | None = "m-1") -> None:
        self.reply = reply
        self.model = model
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        if isinstance(self.reply, BaseException):
            raise self.reply
        return LlmReply(content=self.reply, model=self.model)


OWNER = LayerIds(org_id="o1", team_id="t1", project_id="p1")


def _trajectory(session_id: str = "s1", count: int = 3, every_s: float = 20.0) -> Trajectory:
    return Trajectory(session_id, tuple(make_executions(["search", "read", "fix", "test"][:count], session_id=session_id, every_s=every_s)))


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics]]:
    metrics = InMemoryMetrics()
    with open_stores(tmp_path) as stores:
        yield KnowledgeBase(stores.knowledge, stores.embedder, clock=FakeClock(), metrics=metrics), stores.trajectories, metrics


def test_the_reply_is_split_into_the_five_sections() -> None:
    note = parse_note(REPLY)
    assert note.context == "Users could not log in after the password reset."
    assert note.key_patterns == "Tie session validity to a credentials version."
    assert note.code_examples is None
    assert note.tags == ("auth", "sessions", "security")
    assert note.title == "Users could not log in after the password reset."
    markdown = note.to_markdown()
    assert markdown.startswith("## Context\n") and "## Code Examples" not in markdown and "## Tags\nauth" in markdown


def test_hash_lines_inside_a_code_block_stay_in_code_examples() -> None:
    code = "```python\n# set up the fake clock\nclock = FakeClock()\n## not a heading either\n```"
    reply = REPLY.replace("## Code Examples\nNone", f"## Code Examples\n{code}")
    note = parse_note(reply)
    assert note.code_examples == code
    assert note.tags == ("auth", "sessions", "security")


def test_a_reply_without_a_required_section_is_refused() -> None:
    with pytest.raises(DistillationError, match="lacks the section\\(s\\) Solution, Key Patterns"):
        parse_note("## Context\nSomething happened.\n## Tags\nx")


def test_the_prompt_asks_for_the_sections_and_shows_each_step() -> None:
    root = make_execution("plan", result="x" * 5000)
    child = make_execution("write", parent_id=root.id, error="disk full", context_snapshot={"cwd": "/repo"})
    request = build_prompt(Trajectory("s", (root, child)), model="m", max_output_chars=100)
    system, user = (m.content or "" for m in request.messages)
    assert system == INSTRUCTIONS and "## Key Patterns\nWhat reusable patterns emerged?" in system
    assert "### Step 1: plan" in user and "### Step 2: write" in user
    assert "Ran inside step 1" in user and "Error: disk full" in user and "Context: cwd=/repo" in user
    assert "[4900 more characters]" in user
    assert request.model == "m" and request.temperature == 0.0


def test_the_prompt_describes_which_steps_one_reply_asked_for_and_which_ran_inside_another() -> None:
    search, read = make_execution("search", step_id="m1"), make_execution("read", step_id="m1")
    delegate = make_execution("delegate", step_id="m2")
    nested = make_execution("add", step_id="m3", parent_id=delegate.id)
    answer = make_execution("reply", step_id="m4")
    _, user = (m.content or "" for m in build_prompt(Trajectory("s", (search, read, delegate, nested, answer))).messages)
    blocks = {block.splitlines()[0]: block for block in user.split("\n\n") if block.startswith("### Step")}
    assert "together with step 2" in blocks["### Step 1: search"]
    assert "together with step 1" in blocks["### Step 2: read"]
    assert "Ran inside step 3" in blocks["### Step 4: add"]
    for plain in ("### Step 3: delegate", "### Step 5: reply"):
        assert "Ran inside" not in blocks[plain] and "together" not in blocks[plain]


def test_a_good_trajectory_becomes_a_draft_project_note(parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics]) -> None:
    knowledge, store, metrics = parts
    distiller = Distiller(Model(), knowledge, store, clock=FakeClock(), metrics=metrics)
    trajectory = _trajectory()
    result = asyncio.run(distiller.distill(trajectory, success=True, owner=OWNER, user_id="u1"))
    assert result.status is DistillationStatus.STORED and result.note is not None
    assert result.note.layer is Layer.PROJECT and result.note.metadata is not None
    assert result.note.metadata.llm_model_used == "m-1" and result.note.metadata.user_id == "u1"
    assert asyncio.run(store.is_distilled(trajectory.distilled_key(OWNER)))
    assert metrics.counter("note_taking.distillation.total", {"status": "success"}) == 1


def test_a_reply_holding_bytes_no_store_takes_is_stored_with_them_replaced(
    parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics],
) -> None:
    knowledge, store, _ = parts
    reply = REPLY.replace("password reset", "reset of report-\udcff.txt")
    result = asyncio.run(Distiller(Model(reply), knowledge, store).distill(_trajectory(), success=True, owner=OWNER))
    assert result.status is DistillationStatus.STORED and result.note is not None, result.reason
    (stored,) = asyncio.run(knowledge.repository.items())
    assert "report-\ufffd.txt" in stored.markdown and "\udcff" not in stored.markdown


def test_a_distilled_trajectory_is_not_distilled_again(parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics]) -> None:
    knowledge, store, _ = parts
    model = Model()
    distiller = Distiller(model, knowledge, store)
    asyncio.run(distiller.distill(_trajectory("s1"), success=True, owner=OWNER))
    again = asyncio.run(distiller.distill(_trajectory("s2"), success=True, owner=OWNER))
    assert again.status is DistillationStatus.SKIPPED and "already distilled" in again.reason
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    ("success", "count", "every_s", "reason"),
    [(False, 3, 20.0, "did not end successfully"), (True, 2, 60.0, "fewer than 3"), (True, 3, 10.0, "less than 30 s")],
)
def test_skip_rules(
    parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics], success: bool, count: int, every_s: float, reason: str
) -> None:
    knowledge, store, metrics = parts
    model = Model()
    result = asyncio.run(
        Distiller(model, knowledge, store, metrics=metrics).distill(_trajectory(count=count, every_s=every_s), success=success, owner=OWNER)
    )
    assert result.status is DistillationStatus.SKIPPED and reason in result.reason
    assert model.requests == [] and metrics.counter("note_taking.distillation.total", {"status": "skip"}) == 1


@pytest.mark.parametrize(
    "reply", [LlmCallError("overloaded", kind=FailureKind.RATE_LIMIT), "## Context\nonly context"]
)
def test_a_failing_model_or_a_bad_reply_is_an_error_not_an_exception(
    parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics], reply: str | BaseException
) -> None:
    knowledge, store, metrics = parts
    result = asyncio.run(Distiller(Model(reply), knowledge, store, metrics=metrics).distill(_trajectory(), success=True, owner=OWNER))
    assert result.status is DistillationStatus.FAILED and result.note is None
    assert not asyncio.run(store.is_distilled(_trajectory().distilled_key(OWNER)))
    assert metrics.counter("note_taking.distillation.total", {"status": "error"}) == 1
    assert len(metrics.observations("note_taking.distillation.duration_ms")) == 1


def test_a_near_duplicate_raises_the_reference_count_instead(parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics]) -> None:
    knowledge, store, _ = parts
    distiller = Distiller(Model(), knowledge, store, settings=DistillationSettings(duplicate_above=0.95))
    first = asyncio.run(distiller.distill(_trajectory("s1"), success=True, owner=OWNER))
    second = asyncio.run(distiller.distill(_trajectory("s2", count=4), success=True, owner=OWNER))
    assert second.status is DistillationStatus.DUPLICATE and second.note is not None and first.note is not None
    assert second.note.key == first.note.key and second.note.reference_count == 1
    assert asyncio.run(knowledge.repository.count()) == 1


def test_notes_of_another_project_are_not_duplicates(parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics]) -> None:
    knowledge, store, _ = parts
    distiller = Distiller(Model(), knowledge, store)
    asyncio.run(distiller.distill(_trajectory("s1"), success=True, owner=OWNER))
    other = LayerIds(org_id="o2", team_id="t9", project_id="p9")
    result = asyncio.run(distiller.distill(_trajectory("s2", count=4), success=True, owner=other))
    assert result.status is DistillationStatus.STORED and asyncio.run(knowledge.repository.count()) == 2


def test_identical_work_of_two_tenants_is_distilled_for_each_and_twice_for_neither(
    parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics],
) -> None:
    """I11: that another chain already distilled the same tool work neither stops this
    chain's note nor tells this chain about it; the same chain is still not distilled twice."""
    knowledge, store, _ = parts
    distiller = Distiller(Model(), knowledge, store, clock=FakeClock())
    other = LayerIds(org_id="o2", team_id="t1", project_id="p1")
    first = asyncio.run(distiller.distill(_trajectory(), success=True, owner=OWNER))
    second = asyncio.run(distiller.distill(_trajectory(), success=True, owner=other))
    again = asyncio.run(distiller.distill(_trajectory(), success=True, owner=other))
    assert first.status is DistillationStatus.STORED and first.note is not None and first.note.layer_ids == OWNER
    assert second.status is DistillationStatus.STORED and second.note is not None and second.note.layer_ids == other
    assert again.status is DistillationStatus.SKIPPED and "already distilled" in again.reason


def test_a_trajectory_the_earlier_release_marked_distilled_is_not_distilled_again(
    parts: tuple[KnowledgeBase, TrajectoryStore, InMemoryMetrics],
) -> None:
    """The earlier release marked a distilled trajectory by its bare content hash."""
    knowledge, store, _ = parts
    asyncio.run(store.mark_distilled(_trajectory().content_hash, "s1", 1, datetime(2026, 1, 1, tzinfo=UTC)))
    result = asyncio.run(Distiller(Model(), knowledge, store, clock=FakeClock()).distill(_trajectory(), success=True, owner=OWNER))
    assert result.status is DistillationStatus.SKIPPED and "already distilled" in result.reason
