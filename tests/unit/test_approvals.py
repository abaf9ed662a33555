"""Tool approval: a call that needs the user's approval waits, durably, for one decision that runs it or denies it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentloop import (
    ApprovalPolicy,
    ChatMessage,
    FinishReason,
    IncomingMessage,
    LlmReply,
    Role,
    Session,
    ToolCall,
    ToolExecutions,
    approval_scope,
    history_scope,
    tool,
)
from agentloop.adapters import open_stores
from agentloop.context import AgentContext
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import ToolLoopSettings, ToolLoopSystem, standard_pipeline

ADA = Session("s1", user_id="ada", project_id="p1", team_id="t1", org_id="o1")
deleted: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    deleted.append(path)
    return f"deleted {path}"


@tool
def list_files() -> str:
    """The files there are."""
    return "a.txt, b.txt"


@pytest.fixture(autouse=True)
def nothing_deleted_yet() -> None:
    deleted.clear()


def turn(
    data: Path, llm: ScriptedLLM, incoming: IncomingMessage, session: Session = ADA, approval: ApprovalPolicy | None = None,
    turn_id: str | None = None,
) -> AgentContext:
    """One turn of a standard bot freshly opened on `data`: each turn is a restart, with nothing kept but the stores."""
    with standard_pipeline(llm, RecordingChannel(), data_dir=data, tools=[delete_file, list_files], approval=approval) as pipeline:
        loop = pipeline.build()
        return asyncio.run(loop.run_turn(session, incoming, turn_id=turn_id))


def ask_to_delete(tmp_path: Path) -> tuple[ScriptedLLM, str]:
    """A first turn in which the model asks to delete a.txt; the model for later turns and the approval id."""
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}, text="I'll delete it."), "a.txt is gone."])
    ctx = turn(tmp_path, llm, IncomingMessage("delete a.txt"))
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.approval is not None
    return llm, outcome.approval.approval_id


def test_a_call_needing_approval_ends_the_turn_asking_for_it_and_does_not_run(tmp_path: Path) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"})])
    ctx = turn(tmp_path, llm, IncomingMessage("delete a.txt"))
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.AWAITING_APPROVAL
    assert outcome.approval is not None and (outcome.approval.tool, outcome.approval.arguments) == ("delete_file", {"path": "a.txt"})
    assert (outcome.approval.session_id, outcome.approval.turn_id) == ("s1", ctx.turn_id)
    assert outcome.outgoing_response is not None and outcome.outgoing_response.text is not None
    assert "delete_file(path='a.txt')" in outcome.outgoing_response.text and "approv" in outcome.outgoing_response.text
    assert deleted == [] and outcome.assistant_text is None
    with open_stores(tmp_path) as stores:
        assert [m.content for m in asyncio.run(stores.sessions.recent(history_scope(ADA), 10))] == ["delete a.txt"]
        assert [p.request for p in asyncio.run(stores.approvals.pending(approval_scope(ADA), "s1"))] == [outcome.approval]


def test_approving_after_a_restart_runs_the_call_once_and_the_model_continues_to_the_answer(tmp_path: Path) -> None:
    llm, approval_id = ask_to_delete(tmp_path)
    ctx = turn(tmp_path, llm, IncomingMessage.approval(approval_id, approved=True))
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.SUCCESS
    assert outcome.assistant_text == "a.txt is gone." and outcome.approval is None
    assert deleted == ["a.txt"]
    resumed = llm.requests[-1].messages
    assert resumed[:len(llm.requests[0].messages)] == llm.requests[0].messages, "the conversation resumes as it was"
    assert resumed[-2].tool_calls[0].name == "delete_file" and resumed[-1] == ChatMessage.tool(
        resumed[-2].tool_calls[0].id, "delete_file", "deleted a.txt"
    )
    with open_stores(tmp_path) as stores:
        history = asyncio.run(stores.sessions.recent(history_scope(ADA), 10))
        assert [m.content for m in history] == ["delete a.txt", "/approve", "a.txt is gone."]
        assert asyncio.run(stores.approvals.pending(approval_scope(ADA), "s1")) == []


def test_denying_tells_the_model_with_the_users_note_as_the_calls_result_and_nothing_runs(tmp_path: Path) -> None:
    _, approval_id = ask_to_delete(tmp_path)
    llm = ScriptedLLM(["Understood, I left a.txt alone."])
    outcome = turn(tmp_path, llm, IncomingMessage.approval(approval_id, approved=False, note="keep it")).turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.SUCCESS
    assert outcome.assistant_text == "Understood, I left a.txt alone." and deleted == []
    told = llm.requests[0].messages[-1]
    assert (told.role, told.name, told.content) == (Role.TOOL, "delete_file", "the user denied this call: keep it")


def test_an_approval_is_used_once_a_second_decision_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    llm, approval_id = ask_to_delete(tmp_path)
    turn(tmp_path, llm, IncomingMessage.approval(approval_id, approved=True))
    again = ScriptedLLM(["should not be asked"])
    ctx = turn(tmp_path, again, IncomingMessage.approval(approval_id, approved=True))
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.ERROR
    assert outcome.outgoing_response is not None
    assert outcome.outgoing_response.text == "Sorry, that approval was already answered or does not exist."
    assert deleted == ["a.txt"] and again.requests == []


def test_another_session_cannot_decide_the_approval(tmp_path: Path) -> None:
    _, approval_id = ask_to_delete(tmp_path)
    for other in (Session("s2", user_id="ada", project_id="p1", team_id="t1", org_id="o1"),
                  Session("s1", user_id="ada", project_id="p1", team_id="t1", org_id="other")):
        outcome = turn(tmp_path, ScriptedLLM([]), IncomingMessage.approval(approval_id, approved=True), other).turn_outcome
        assert outcome is not None and outcome.finish_reason is FinishReason.ERROR
    assert deleted == []
    assert turn(tmp_path, ScriptedLLM(["done"]), IncomingMessage.approval(approval_id, approved=True)).turn_outcome is not None
    assert deleted == ["a.txt"]


def test_calls_before_the_one_awaiting_approval_run_and_later_ones_are_answered_as_not_run(tmp_path: Path) -> None:
    calls = (ToolCall("c1", "list_files", {}), ToolCall("c2", "delete_file", {"path": "a.txt"}), ToolCall("c3", "list_files", {}))
    llm = ScriptedLLM([LlmReply(tool_calls=calls), "done"])
    first = turn(tmp_path, llm, IncomingMessage("tidy up"))
    assert [e.tool_name for e in first.require(ToolExecutions).executions] == ["list_files"]
    outcome = first.turn_outcome
    assert outcome is not None and outcome.approval is not None
    turn(tmp_path, llm, IncomingMessage.approval(outcome.approval.approval_id, approved=True))
    results = {m.tool_call_id: m.content for m in llm.requests[-1].messages if m.role is Role.TOOL}
    assert results["c1"] == "a.txt, b.txt" and results["c2"] == "deleted a.txt"
    assert results["c3"] is not None and results["c3"].startswith("not run")


def test_the_approval_hook_decides_per_call(tmp_path: Path) -> None:
    def big_ones(ctx: AgentContext, call: ToolCall) -> bool:
        return call.name == "delete_file" and call.arguments.get("path") == "important.txt"

    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "deleted a.txt",
                       ScriptedLLM.tool_call("delete_file", {"path": "important.txt"})])
    first = turn(tmp_path, llm, IncomingMessage("delete a.txt"), approval=big_ones).turn_outcome
    second = turn(tmp_path, llm, IncomingMessage("delete important.txt"), approval=big_ones).turn_outcome
    assert first is not None and first.finish_reason is FinishReason.SUCCESS and deleted == ["a.txt"]
    assert second is not None and second.finish_reason is FinishReason.AWAITING_APPROVAL and deleted == ["a.txt"]


def test_a_tool_loop_without_an_approvals_store_refuses_tools_that_need_approval() -> None:
    with pytest.raises(ValueError, match="'delete_file' need approval.*approvals="):
        ToolLoopSystem(ScriptedLLM(), [delete_file])
    with pytest.raises(ValueError, match="approval hook.*approvals="):
        ToolLoopSystem(ScriptedLLM(), [list_files], ToolLoopSettings(approval=lambda ctx, call: True))



def test_a_decision_run_again_under_its_message_id_after_a_worker_died_finishes_the_call(tmp_path: Path) -> None:
    """I13: a worker runs a message's turn under the message id; one that died after taking the approval
    leaves the retry the same key, so the retried decision runs the call instead of calling it used."""
    llm, approval_id = ask_to_delete(tmp_path)
    decision = IncomingMessage.approval(approval_id, approved=True)
    turn(tmp_path, ScriptedLLM([RuntimeError("the worker died here")]), decision, turn_id="message-7")
    retried = turn(tmp_path, ScriptedLLM(["a.txt is gone."]), decision, turn_id="message-7").turn_outcome
    assert retried is not None and retried.finish_reason is FinishReason.SUCCESS
    assert retried.assistant_text == "a.txt is gone."
    other = turn(tmp_path, ScriptedLLM(["should not be asked"]), decision, turn_id="message-8").turn_outcome
    assert other is not None and other.finish_reason is FinishReason.ERROR
