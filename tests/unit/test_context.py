"""The turn context: inputs, history view, failures, deadline and the typed component store."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given

from agentloop import (
    AgentContext,
    ChatMessage,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    IncomingMessage,
    MissingComponentError,
    OutgoingResponse,
    Session,
    TurnOutcome,
    converter,
)
from agentloop.testing import FakeClock, make_context, strategies


@attrs.frozen
class Greeting:
    text: str


@attrs.frozen
class Farewell:
    text: str


def test_inputs_are_components_too() -> None:
    ctx = make_context("hi")
    assert ctx.get(Session) is ctx.session
    assert ctx.require(IncomingMessage) is ctx.incoming


def test_set_get_has_remove() -> None:
    ctx = make_context()
    assert ctx.get(Greeting) is None and not ctx.has(Greeting)
    ctx.set(Greeting("hello"))
    assert ctx.get(Greeting) == Greeting("hello") and ctx.has(Greeting)
    ctx.set(Greeting("again"))
    assert ctx.require(Greeting) == Greeting("again")
    ctx.remove(Greeting)
    ctx.remove(Greeting)
    assert not ctx.has(Greeting)


def test_components_are_keyed_by_exact_type() -> None:
    ctx = make_context()
    ctx.set(Greeting("a"))
    ctx.set(Farewell("b"))
    assert ctx.get(Greeting) == Greeting("a")
    assert ctx.get(Farewell) == Farewell("b")
    assert ctx.components()[-2:] == (Greeting("a"), Farewell("b"))


def test_require_names_the_system_and_the_type() -> None:
    ctx = make_context()
    ctx.current_system = "ReplySystem"
    with pytest.raises(MissingComponentError, match=r"'ReplySystem' requires a Greeting component") as info:
        ctx.require(Greeting)
    assert isinstance(info.value, LookupError)
    assert (info.value.component, info.value.system) == (Greeting, "ReplySystem")


def test_require_outside_a_system_names_the_caller() -> None:
    with pytest.raises(MissingComponentError, match="the caller requires a Greeting"):
        make_context().require(Greeting)


@pytest.mark.parametrize("value", ["text", 3, {"k": "v"}, ["x"]])
def test_builtin_values_cannot_be_components(value: object) -> None:
    with pytest.raises(TypeError, match="wrap it in an attrs class"):
        make_context().set(value)


def test_turn_outcome_property_reads_the_component() -> None:
    ctx = make_context()
    assert ctx.turn_outcome is None
    outcome = TurnOutcome(FinishReason.SUCCESS, outgoing_response=OutgoingResponse.text_only("hi"))
    ctx.set(outcome)
    assert ctx.turn_outcome is outcome


def test_history_is_a_read_only_snapshot() -> None:
    history = [ChatMessage.user("earlier"), ChatMessage.assistant("reply")]
    ctx = make_context(history=history)
    history.append(ChatMessage.user("later"))
    assert ctx.history == (ChatMessage.user("earlier"), ChatMessage.assistant("reply"))
    with pytest.raises(AttributeError):
        ctx.history = ()  # type: ignore[misc]


def test_failures_are_appended_in_order_and_exposed_read_only() -> None:
    clock = FakeClock()
    ctx = make_context(clock=clock)
    first = FailureEvent(FailureSource.LLM, "llm", FailureKind.RATE_LIMIT, "slow down", clock.now())
    second = FailureEvent(FailureSource.TOOL, "search", FailureKind.EXCEPTION, "boom", clock.now())
    ctx.add_failure(first)
    ctx.add_failure(second)
    assert ctx.failures == (first, second)
    assert isinstance(ctx.failures, tuple)


def test_deadline_follows_the_clock() -> None:
    clock = FakeClock()
    ctx = make_context(clock=clock, timeout=2.0)
    assert ctx.time_left() == pytest.approx(2.0)
    assert not ctx.deadline_passed()
    clock.advance(2.5)
    assert ctx.time_left() == pytest.approx(-0.5)
    assert ctx.deadline_passed()


def test_no_deadline_never_passes() -> None:
    ctx = make_context()
    assert ctx.time_left() is None and not ctx.deadline_passed()


def test_auto_mode_comes_from_the_message() -> None:
    assert make_context(auto_mode=True).auto_mode
    assert not make_context().auto_mode


def test_each_context_has_its_own_turn_id() -> None:
    assert make_context().turn_id != make_context().turn_id
    assert AgentContext(Session("s"), IncomingMessage("x"), turn_id="t-1").turn_id == "t-1"


def test_repr_names_session_and_components() -> None:
    ctx = make_context(components=[Greeting("x")])
    assert "session='test-session'" in repr(ctx) and "Greeting" in repr(ctx)


def test_message_metadata_is_copied() -> None:
    metadata = {"source": "web"}
    message = IncomingMessage("x", metadata=metadata)
    metadata["source"] = "cli"
    assert message.metadata == {"source": "web"}


@given(strategies.sessions, strategies.incoming_messages)
def test_inputs_round_trip_through_the_converter(session: Session, incoming: IncomingMessage) -> None:
    assert converter.structure(converter.unstructure(session), Session) == session
    assert converter.structure(converter.unstructure(incoming), IncomingMessage) == incoming


def test_an_approval_decision_is_a_message_that_crosses_json_whole() -> None:
    denied = IncomingMessage.approval("a1", approved=False, note="not that file")
    assert denied.text == "/deny not that file" and IncomingMessage.approval("a1", approved=True).text == "/approve"
    data = json.loads(json.dumps(converter.unstructure(denied)))
    assert data["decision"] == {"approval_id": "a1", "approved": False, "note": "not that file"}
    assert converter.structure(data, IncomingMessage) == denied
