"""NoteTaking and open_note_taking: end of session, fallbacks, shutdown."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentloop import LlmReply, LlmRequest, Session
from agentloop.adapters import InMemoryMetrics, open_note_taking
from agentloop.notes.errors import CaptureDrainError
from agentloop.notes import CaptureSettings, DistillationStatus, KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.testing import FakeClock
from agentloop.testing.notes import FlakyTrajectoryStore, make_executions

AT = datetime(2026, 1, 1, tzinfo=UTC)
REPLY = "## Context\nCI was red.\n## Solution\nPin the tool versions.\n## Key Patterns\nPin versions in CI.\n## Tags\nci"


class Model:
    def __init__(self) -> None:
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        return LlmReply(content=REPLY, model="m-2")


def test_a_session_end_distills_what_was_captured(tmp_path: Path) -> None:
    clock = FakeClock()
    with open_note_taking(tmp_path, Model(), clock=clock) as notes:
        session = Session("s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1")
        notes.observe_session(session)
        for execution in make_executions(
            ["lint", "test", "pin"], session_id="s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1"
        ):
            notes.recorder.enqueue(execution)
        result = asyncio.run(notes.end_session("s1", success=True))
        assert result.status is DistillationStatus.STORED and result.note is not None
        assert result.note.layer_ids == LayerIds("default", "o1", "t1", "p1")
        found = asyncio.run(notes.retrieve("pin tool versions in CI", session))
        assert [r.item.key for r in found] == [result.note.key]
    assert (tmp_path / "bot.notes.sqlite3").exists() and (tmp_path / "bot.notes.sqlite3.hnsw").exists()
    assert (tmp_path / "bot.trajectories.sqlite3").exists()


def test_a_session_never_observed_is_skipped_rather_than_stored_under_an_invented_chain(tmp_path: Path) -> None:
    metrics = InMemoryMetrics()
    model = Model()
    notes = open_note_taking(tmp_path, model, company_id="acme", metrics=metrics)
    for execution in make_executions(["lint", "test", "pin"], session_id="s7", project_id="p7", user_id="u7"):
        notes.recorder.enqueue(execution)
    result = asyncio.run(notes.end_session("s7", success=True))
    assert result.status is DistillationStatus.SKIPPED and result.note is None
    assert result.reason.startswith("session chain unknown: ")
    assert model.requests == [] and metrics.counter("note_taking.distillation.total", {"status": "skip"}) == 1
    notes.close()


def test_the_session_itself_may_be_passed_when_it_was_never_observed(tmp_path: Path) -> None:
    notes = open_note_taking(tmp_path, Model(), company_id="acme")
    chain = {"project_id": "p7", "user_id": "u7", "team_id": "t7", "org_id": "o7"}
    for execution in make_executions(["lint", "test", "pin"], session_id="s7", **chain):
        notes.capture(execution)
    session = Session("s7", user_id="u7", project_id="p7", team_id="t7", org_id="o7")
    result = asyncio.run(notes.end_session(session, success=True))
    assert result.note is not None and result.note.metadata is not None
    assert result.note.layer is Layer.PROJECT and result.note.layer_ids == LayerIds("acme", "o7", "t7", "p7")
    assert result.note.metadata.user_id == "u7"
    assert [r.item.key for r in asyncio.run(notes.retrieve("pin tool versions in CI", session))] == [result.note.key]
    notes.close()


def test_a_store_that_cannot_take_the_trajectory_fails_the_distillation(tmp_path: Path) -> None:
    metrics = InMemoryMetrics()
    model = Model()
    notes = open_note_taking(tmp_path, model, metrics=metrics, capture=CaptureSettings(drain_timeout_s=0.2))
    flaky = FlakyTrajectoryStore(notes.recorder.store)
    notes.recorder.store = flaky
    for execution in make_executions(["lint", "test", "pin"], session_id="s1"):
        notes.recorder.enqueue(execution)
    flaky.failing = True
    result = asyncio.run(notes.end_session("s1", success=True))
    assert result.status is DistillationStatus.FAILED and "could not be written" in result.reason
    assert model.requests == [] and metrics.counter("note_taking.distillation.total", {"status": "error"}) == 1
    flaky.failing = False
    assert notes.recorder.drain() == 3 and asyncio.run(flaky.count()) == 3
    notes.close()


def test_a_session_end_waiting_on_a_locked_store_never_stalls_the_event_loop(tmp_path: Path) -> None:
    notes = open_note_taking(tmp_path, Model(), capture=CaptureSettings(drain_timeout_s=0.3))
    session = Session("s1")
    notes.observe_session(session)
    notes.recorder.enqueue(make_executions(["lint"], session_id="s1", user_id=None)[0])
    other = sqlite3.connect(tmp_path / "bot.trajectories.sqlite3", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while

    async def main() -> tuple[float, int, DistillationStatus, str]:
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                await asyncio.sleep(0.02)
                beats += 1

        beating = asyncio.create_task(heartbeat())
        started = time.monotonic()
        result = await notes.end_session(session, success=True)
        took = time.monotonic() - started
        beating.cancel()
        other.execute("ROLLBACK")  # the lock goes; the drain still running in its thread finishes
        return took, beats, result.status, result.reason

    took, beats, status, reason = asyncio.run(main())
    assert status is DistillationStatus.FAILED and "still queued" in reason
    assert took < 2.0 and beats >= 5  # the loop kept running other work meanwhile
    notes.close()
    assert notes.recorder.stats.written == 1
    other.close()


def test_close_closes_the_stores_and_saves_the_index_even_when_capture_cannot_drain(tmp_path: Path) -> None:
    notes = open_note_taking(tmp_path, Model(), capture=CaptureSettings(close_timeout_s=0.1))
    trajectories = notes.recorder.store
    flaky = FlakyTrajectoryStore(trajectories)
    notes.recorder.store = flaky
    notes.recorder.enqueue(make_executions(["lint"], session_id="s1")[0])
    flaky.failing = True
    with pytest.raises(CaptureDrainError):
        notes.close()
    assert (tmp_path / "bot.notes.sqlite3.hnsw").exists()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        asyncio.run(notes.knowledge.repository.items())
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        asyncio.run(trajectories.count())


def test_observed_sessions_are_bounded_and_the_least_recent_is_dropped_first(tmp_path: Path) -> None:
    notes = open_note_taking(tmp_path, Model())
    notes.max_sessions = 50
    first = Session("s0", project_id="p1")
    notes.observe_session(first)
    for number in range(1, 500):
        notes.observe_session(Session(f"s{number}", project_id="p1"))
        if number % 10 == 0:
            notes.observe_session(first)  # recently observed again, so kept
        assert len(notes._sessions) <= 50
    observed = {key.session_id for key in notes._sessions}
    assert "s0" in observed and "s1" not in observed and "s499" in observed
    notes.close()


def test_a_session_id_repeated_under_another_org_does_not_pull_its_executions_into_the_note(tmp_path: Path) -> None:
    """I11: distillation reads only the executions of the ending session's own chain."""
    model = Model()
    with open_note_taking(tmp_path, model) as notes:
        acme = Session("s1", user_id="u1", project_id="shop", org_id="acme")
        globex = Session("s1", user_id="u1", project_id="shop", org_id="globex")
        for tools, org in ((["lint", "test", "pin"], "acme"), (["globex_secret_tool"], "globex")):
            for execution in make_executions(tools, session_id="s1", user_id="u1", project_id="shop", org_id=org):
                notes.recorder.enqueue(execution)
        result = asyncio.run(notes.end_session(acme, success=True))
        assert result.status is DistillationStatus.STORED
        (request,) = model.requests
        prompt = request.messages[-1].content or ""
        assert "lint" in prompt and "globex_secret_tool" not in prompt
        assert asyncio.run(notes.end_session(globex, success=True)).status is DistillationStatus.SKIPPED


def test_two_companies_sharing_the_files_distill_only_their_own_executions(tmp_path: Path) -> None:
    """I11: the same session id and chain below the company, in two companies on one data
    dir, are two trajectories: capture stamps each execution with its company."""
    session = Session("s1", user_id="ada", project_id="shop", team_id="web", org_id="acme")
    chain = {"session_id": "s1", "user_id": "ada", "project_id": "shop", "team_id": "web", "org_id": "acme"}
    with open_note_taking(tmp_path, Model(), company_id="c1") as first:
        for execution in make_executions(["c1_secret_lookup", "c1_secret_write", "c1_secret_pin"], **chain):
            first.capture(execution)
    model = Model()
    with open_note_taking(tmp_path, model, company_id="c2") as second:
        for execution in make_executions(["lint", "test", "pin"], **chain):
            second.capture(execution)
        result = asyncio.run(second.end_session(session, success=True))
    assert result.status is DistillationStatus.STORED
    prompt = model.requests[-1].messages[-1].content or ""
    assert "lint" in prompt and "c1_secret" not in prompt


def test_feedback_credits_only_the_notes_the_same_chain_was_shown(tmp_path: Path) -> None:
    """I11: a session id repeated under another org gives feedback on its own session, so
    it credits nothing the first org's session was shown."""
    with open_note_taking(tmp_path, Model()) as notes:
        acme, globex = Session("s1", org_id="acme"), Session("s1", org_id="globex")
        owner = LayerIds("default", "acme")
        text = "acme deploys on fridays"
        item = asyncio.run(notes.knowledge.add(
            KnowledgeItem(NoteType.PATTERN, Layer.ORG, owner, "acme deploy", text, notes.knowledge.embed(text), AT)
        ))
        assert [r.item.key for r in asyncio.run(notes.retrieve(text, acme))] == [item.key]
        assert asyncio.run(notes.retrieve(text, globex)) == []
        assert asyncio.run(notes.record_feedback(globex, positive=True)) == []
        assert asyncio.run(notes.knowledge.get(item.key)).usefulness_score == 0
        assert [i.key for i in asyncio.run(notes.record_feedback(acme, positive=True))] == [item.key]
        with pytest.raises(TypeError, match="takes the Session"):
            asyncio.run(notes.record_feedback("s1", positive=True))  # type: ignore[arg-type]


def test_an_id_observed_under_two_chains_is_skipped_rather_than_guessed(tmp_path: Path) -> None:
    model = Model()
    with open_note_taking(tmp_path, model) as notes:
        acme = Session("s1", user_id="u1", project_id="shop", org_id="acme")
        globex = Session("s1", user_id="u1", project_id="shop", org_id="globex")
        for session in (acme, globex):
            notes.observe_session(session)
            tools = [f"{session.org_id}_{step}" for step in ("lint", "test", "pin")]
            for execution in make_executions(tools, session_id="s1", user_id="u1", project_id="shop", org_id=session.org_id):
                notes.capture(execution)
        result = asyncio.run(notes.end_session("s1", success=True))
        assert result.status is DistillationStatus.SKIPPED and result.reason.startswith("session chain ambiguous: ")
        assert model.requests == []
        assert asyncio.run(notes.end_session(globex, success=True)).status is DistillationStatus.STORED
        # globex's session is forgotten now, so the id names acme's alone
        assert asyncio.run(notes.end_session("s1", success=True)).status is not DistillationStatus.SKIPPED
        assert "acme_lint" in (model.requests[-1].messages[-1].content or "")
