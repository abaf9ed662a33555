"""TurnOutcomeFinalizationSystem: one outcome, the right finish reason, fallback texts never canonical."""

from __future__ import annotations

from agentloop import (
    Attachment,
    FailureKind,
    FinishReason,
    LlmFailure,
    LlmResponse,
    OutgoingResponse,
    PlanProposal,
    StreamedText,
    ToolCall,
    ToolLoopStop,
    TurnOutcome,
)
from agentloop.testing import make_context, run_system_sync
from systems import TurnOutcomeFinalizationSystem
from systems.outcome import CUT_STREAM_TEXT, DEFAULT_ERROR_TEXTS, GENERIC_ERROR_TEXT as DEFAULT_GENERIC, render_plan


def finalize(*components: object, auto_mode: bool = False):  # type: ignore[no-untyped-def]
    ctx = make_context(auto_mode=auto_mode, components=components)
    run_system_sync(TurnOutcomeFinalizationSystem(), ctx)
    return ctx.turn_outcome


def test_a_final_answer_is_the_canonical_text() -> None:
    outcome = finalize(LlmResponse("Hi!", model="m1"))
    assert outcome.finish_reason is FinishReason.SUCCESS and outcome.assistant_text == "Hi!"
    assert outcome.outgoing_response == OutgoingResponse.text_only("Hi!") and not outcome.fallback
    assert outcome.model == "m1"


def test_voice_repeating_the_text_is_sent_as_voice_only() -> None:
    outcome = finalize(LlmResponse("Sunny.", voice_text="Sunny."))
    assert outcome.outgoing_response == OutgoingResponse.voice_only("Sunny.")
    assert outcome.assistant_text == "Sunny."
    both = finalize(LlmResponse("Details: 21C, wind 3 m/s", voice_text="Sunny."))
    assert both.outgoing_response == OutgoingResponse(text="Details: 21C, wind 3 m/s", voice_text="Sunny.")


def test_attachments_only_has_no_canonical_text() -> None:
    chart = Attachment("c.png", "image/png", b"x")
    outcome = finalize(LlmResponse("", attachments=(chart,)))
    assert outcome.outgoing_response == OutgoingResponse(attachments=(chart,)) and outcome.assistant_text is None
    assert not outcome.fallback


def test_errors_and_stops_explain_themselves_as_fallbacks() -> None:
    outcome = finalize(LlmFailure(FailureKind.RATE_LIMIT, "429"))
    assert outcome.finish_reason is FinishReason.ERROR and outcome.fallback and outcome.assistant_text is None
    assert outcome.outgoing_response.text == DEFAULT_ERROR_TEXTS[FailureKind.RATE_LIMIT]
    denied = finalize(ToolLoopStop(FinishReason.POLICY_DENIED, "payments are off"))
    assert denied.finish_reason is FinishReason.POLICY_DENIED and "payments are off" in denied.outgoing_response.text


def test_plan_mode_shows_the_plan() -> None:
    plan = PlanProposal(None, (ToolCall("1", "search", {"q": "x"}), ToolCall("2", "mail", {})))
    outcome = finalize(plan, ToolLoopStop(FinishReason.PLAN_MODE, "plan"))
    assert outcome.finish_reason is FinishReason.PLAN_MODE
    assert outcome.assistant_text == render_plan(plan) == "Here is what I would do:\n1. search(q='x')\n2. mail()"


def test_priority_follows_resolve_finish_reason() -> None:
    outcome = finalize(LlmFailure(FailureKind.UNKNOWN, "x"), ToolLoopStop(FinishReason.ITERATION_LIMIT, "limit"))
    assert outcome.finish_reason is FinishReason.ITERATION_LIMIT


def test_nothing_produced_leaves_user_turns_to_the_feedback_guarantee_but_builds_auto_outcomes() -> None:
    assert finalize() is None
    auto = finalize(auto_mode=True)
    assert auto.auto_mode and auto.finish_reason is FinishReason.ERROR and auto.outgoing_response is None
    answered = finalize(LlmResponse("done"), auto_mode=True)
    assert answered.assistant_text == "done" and answered.outgoing_response is None and not answered.fallback


def test_an_outcome_an_earlier_system_wrote_is_kept_as_it_is() -> None:
    own = TurnOutcome(FinishReason.SUCCESS, "Answered by a custom system", OutgoingResponse.text_only("Answered by a custom system"))
    ctx = make_context(components=[own, LlmResponse("the model's answer"), LlmFailure(FailureKind.EXCEPTION, "boom")])
    assert run_system_sync(TurnOutcomeFinalizationSystem(), ctx) is False
    assert ctx.turn_outcome == own


def test_whitespace_only_text_and_voice_are_no_answer() -> None:
    outcome = finalize(LlmResponse(" \n ", voice_text="\t"))
    assert outcome.fallback and outcome.assistant_text is None
    assert outcome.outgoing_response == OutgoingResponse.text_only(DEFAULT_GENERIC)
    voiced = finalize(LlmResponse("Details.", voice_text="  "))
    assert voiced.outgoing_response == OutgoingResponse.text_only("Details.") and voiced.assistant_text == "Details."


def test_an_answer_cut_off_while_the_user_watched_it_says_so() -> None:
    error = LlmFailure(FailureKind.UNKNOWN, "the connection closed")
    cut = finalize(error, StreamedText("m1", "It is sun", complete=False))
    assert cut.fallback and cut.assistant_text is None and cut.outgoing_response.text == CUT_STREAM_TEXT
    for shown in (StreamedText("m1", "Let me look.", complete=True), StreamedText("m1", "", complete=False)):
        assert finalize(error, shown).outgoing_response.text == DEFAULT_GENERIC
