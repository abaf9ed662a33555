"""Contracts of a finished turn: invariants, helpers, the finish-reason rule, JSON round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import (
    FINISH_REASON_PRIORITY,
    Attachment,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    OutgoingResponse,
    RoutingOutcome,
    TurnOutcome,
    converter,
    resolve_finish_reason,
)
from agentloop.testing import strategies

WHEN = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_user_facing_outcome_without_response_is_refused() -> None:
    with pytest.raises(ValueError, match="outgoing_response"):
        TurnOutcome(FinishReason.SUCCESS, assistant_text="hi")


def test_auto_mode_outcome_may_have_no_response() -> None:
    outcome = TurnOutcome(FinishReason.SUCCESS, assistant_text="done", auto_mode=True)
    assert outcome.outgoing_response is None
    assert outcome.fallback is False


def test_outcome_defaults_match_the_contract() -> None:
    outcome = TurnOutcome(FinishReason.ERROR, outgoing_response=OutgoingResponse.text_only("sorry"))
    assert (outcome.assistant_text, outcome.failures, outcome.raw_history_written) == (None, (), False)
    assert (outcome.model, outcome.auto_mode, outcome.routing_outcome, outcome.fallback) == (None, False, None, False)


def test_outcome_is_frozen() -> None:
    outcome = TurnOutcome(FinishReason.SUCCESS, outgoing_response=OutgoingResponse.text_only("x"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        outcome.assistant_text = "changed"  # type: ignore[misc]


def test_text_only_and_voice_only_put_intent_in_the_right_field() -> None:
    assert OutgoingResponse.text_only("hello") == OutgoingResponse(text="hello")
    voice = OutgoingResponse.voice_only("hello")
    assert (voice.text, voice.voice_text) == (None, "hello")


def test_empty_response_is_detected() -> None:
    assert OutgoingResponse().is_empty
    assert OutgoingResponse(text="").is_empty
    assert not OutgoingResponse(attachments=(Attachment("a.png", "image/png", b"x"),)).is_empty


def test_whitespace_only_text_is_nothing_a_user_would_see() -> None:
    assert OutgoingResponse(text=" \n\t", voice_text="  ").is_empty
    assert not OutgoingResponse(text=" hi ").is_empty
    assert TurnOutcome(FinishReason.SUCCESS, assistant_text=" \n ", auto_mode=True).assistant_text is None
    assert TurnOutcome(FinishReason.SUCCESS, assistant_text=" hi ", auto_mode=True).assistant_text == " hi "


def test_hints_are_copied_so_the_caller_cannot_mutate_a_response() -> None:
    hints = {"format": "markdown"}
    response = OutgoingResponse(text="x", hints=hints)
    hints["format"] = "plain"
    assert response.hints == {"format": "markdown"}


@pytest.mark.parametrize(
    ("routing", "delivered"),
    [
        (RoutingOutcome(), False),
        (RoutingOutcome(attempted=True, error_message="channel down"), False),
        (RoutingOutcome(attempted=True, sent_text=True), True),
        (RoutingOutcome(attempted=True, sent_voice=True), True),
        (RoutingOutcome(attempted=True, sent_attachments=2), True),
    ],
)
def test_delivered_means_something_went_out(routing: RoutingOutcome, delivered: bool) -> None:
    assert routing.delivered is delivered


def test_priority_order_is_the_documented_one() -> None:
    assert FINISH_REASON_PRIORITY == (
        FinishReason.DEADLINE,
        FinishReason.BUDGET_EXCEEDED,
        FinishReason.ITERATION_LIMIT,
        FinishReason.POLICY_DENIED,
        FinishReason.AWAITING_APPROVAL,
        FinishReason.ERROR,
        FinishReason.INTERRUPTED,
        FinishReason.PLAN_MODE,
        FinishReason.SUCCESS,
    )
    assert set(FINISH_REASON_PRIORITY) == set(FinishReason)


def test_no_reason_at_all_is_success() -> None:
    assert resolve_finish_reason([]) is FinishReason.SUCCESS


@given(st.lists(st.sampled_from(FinishReason), min_size=1))
def test_resolve_picks_the_most_severe_reason(reasons: list[FinishReason]) -> None:
    """I8: the resolved reason is present and no present reason outranks it."""
    winner = resolve_finish_reason(reasons)
    assert winner in reasons
    assert all(FINISH_REASON_PRIORITY.index(winner) <= FINISH_REASON_PRIORITY.index(r) for r in reasons)
    assert resolve_finish_reason(reversed(reasons)) is winner


def test_failure_event_serialises_to_plain_json() -> None:
    event = FailureEvent(FailureSource.TOOL, "search", FailureKind.TIMEOUT, "took too long", WHEN)
    data = converter.unstructure(event)
    assert data == {
        "source": "tool",
        "component": "search",
        "kind": "timeout",
        "message": "took too long",
        "timestamp": "2026-05-01T12:00:00+00:00",
    }
    assert converter.structure(json.loads(json.dumps(data)), FailureEvent) == event


def test_attachment_bytes_travel_as_base64() -> None:
    attachment = Attachment("a.bin", data=b"\x00\xff")
    data = converter.unstructure(attachment)
    assert data["data"] == "AP8="
    assert converter.structure(data, Attachment) == attachment


@given(strategies.turn_outcomes())
def test_every_turn_outcome_round_trips_through_json(outcome: TurnOutcome) -> None:
    data = json.loads(json.dumps(converter.unstructure(outcome)))
    assert converter.structure(data, TurnOutcome) == outcome


@given(strategies.routing_outcomes)
def test_every_routing_outcome_round_trips_through_json(routing: RoutingOutcome) -> None:
    data = json.loads(json.dumps(converter.unstructure(routing)))
    assert converter.structure(data, RoutingOutcome) == routing


@given(strategies.outgoing_responses)
def test_every_outgoing_response_round_trips_through_json(response: OutgoingResponse) -> None:
    data = json.loads(json.dumps(converter.unstructure(response)))
    assert converter.structure(data, OutgoingResponse) == response
