"""Hypothesis strategies for agentloop's contracts (needs the `test` extra)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from agentloop.approvals import ApprovalRequest
from agentloop.context import IncomingMessage, Session
from agentloop.outcome import (
    Attachment,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    OutgoingResponse,
    RoutingOutcome,
    TurnOutcome,
)

__all__ = [
    "approval_requests",
    "attachments",
    "failure_events",
    "finish_reasons",
    "incoming_messages",
    "outgoing_responses",
    "routing_outcomes",
    "sessions",
    "timestamps",
    "turn_outcomes",
]

ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
texts = st.text(max_size=40)
timestamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
finish_reasons = st.sampled_from(FinishReason)
_hints = st.dictionaries(ids, texts, max_size=3)

attachments = st.builds(
    Attachment, name=ids, media_type=st.sampled_from(["image/png", "text/plain"]), data=st.binary(max_size=16),
    url=st.none() | st.just("https://example.invalid/file"),
)
failure_events = st.builds(
    FailureEvent, source=st.sampled_from(FailureSource), component=ids, kind=st.sampled_from(FailureKind),
    message=texts, timestamp=timestamps,
)
outgoing_responses = st.builds(
    OutgoingResponse, text=st.none() | texts, voice_text=st.none() | texts,
    attachments=st.lists(attachments, max_size=2).map(tuple), hints=_hints,
)
routing_outcomes = st.builds(
    RoutingOutcome, attempted=st.booleans(), sent_text=st.booleans(), sent_voice=st.booleans(),
    sent_attachments=st.integers(0, 5), error_message=st.none() | texts,
)
_arguments = st.dictionaries(ids, st.none() | st.booleans() | st.integers() | texts | st.lists(texts, max_size=2), max_size=3)
approval_requests = st.builds(
    ApprovalRequest, approval_id=ids, tool=ids, arguments=_arguments, session_id=ids, turn_id=ids, created_at=timestamps,
)


@st.composite
def turn_outcomes(draw: st.DrawFn) -> TurnOutcome:
    """Valid outcomes: a non-auto outcome always carries an outgoing response; one whose writes were lost is no success."""
    auto_mode = draw(st.booleans())
    response = draw(st.none() | outgoing_responses) if auto_mode else draw(outgoing_responses)
    finish_reason = draw(finish_reasons)
    return TurnOutcome(
        finish_reason=finish_reason,
        assistant_text=draw(st.none() | texts),
        outgoing_response=response,
        failures=tuple(draw(st.lists(failure_events, max_size=3))),
        raw_history_written=draw(st.booleans()),
        model=draw(st.none() | ids),
        auto_mode=auto_mode,
        routing_outcome=draw(st.none() | routing_outcomes),
        fallback=draw(st.booleans()),
        approval=draw(st.none() | approval_requests),
        writes_lost=finish_reason is not FinishReason.SUCCESS and draw(st.booleans()),
    )


sessions = st.builds(
    Session, id=ids, user_id=st.none() | ids, project_id=st.none() | ids, team_id=st.none() | ids,
    org_id=st.none() | ids, channel=st.none() | ids,
)
incoming_messages = st.builds(
    IncomingMessage, text=texts, attachments=st.lists(attachments, max_size=2).map(tuple),
    auto_mode=st.booleans(), metadata=_hints,
) | st.builds(IncomingMessage.approval, ids, approved=st.booleans(), note=st.none() | texts)
"""Messages a user sends: text with files, or a decision on a tool call awaiting approval."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=10,
)
"""Any JSON value: what a task may write in its notes."""
task_notes = st.dictionaries(st.text(), json_values, max_size=4)
"""Task notes of any shape (a JSON object), for I10."""
__all__ += ["json_values", "task_notes"]
