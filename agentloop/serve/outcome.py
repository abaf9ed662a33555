"""The Outcome object a client receives for a turn: what the user sees, why the turn ended, user-safe failures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop.components import ToolExecution
from agentloop.messages import Usage
from agentloop.outcome import FailureEvent, FailureKind, FailureSource, FinishReason, TurnOutcome

_KIND_PHRASES = {
    FailureKind.EXCEPTION: "failed",
    FailureKind.TIMEOUT: "ran out of time",
    FailureKind.VALIDATION: "got data it could not use",
    FailureKind.POLICY: "was not allowed",
    FailureKind.RATE_LIMIT: "was rate limited",
    FailureKind.UNAVAILABLE: "could not reach its storage",
    FailureKind.UNKNOWN: "failed",
}


_SOURCE_PHRASES = {
    FailureSource.LLM: "the model",
    FailureSource.TOOL: "the tool {}",
    FailureSource.SYSTEM: "the step {}",
    FailureSource.TRANSPORT: "sending the answer",
}

RESULT_SHOWN = 2000
"""How many characters of a tool's result a tool step shows; a longer one is cut, ending in "…"."""


def user_safe(failure: FailureEvent) -> str:
    """What went wrong, said without the exception text (which may hold internals): where and what kind,
    as "the model ran out of time" or "the tool weather failed"."""
    return f"{_SOURCE_PHRASES[failure.source].format(failure.component)} {_KIND_PHRASES[failure.kind]}"


def tool_step(execution: ToolExecution) -> dict[str, Any]:
    """One tool the turn ran, for the user who asked: its name, arguments and result (cut to `RESULT_SHOWN`
    characters); a failed call says only that it failed, since its error text may hold internals."""
    result = execution.result
    if result is not None and len(result) > RESULT_SHOWN:
        result = result[: RESULT_SHOWN - 1] + "…"
    failed = execution.error is not None
    return {"name": execution.tool_name, "arguments": execution.arguments, "result": None if failed else result, "failed": failed}


def outcome_json(
    turn_id: str, message_id: str, outcome: TurnOutcome | None, usage: Usage | None = None, tools: Sequence[ToolExecution] = ()
) -> dict[str, Any]:
    """The Outcome object of a finished turn; a turn whose pipeline wrote no outcome is an error without text.
    The model's token `usage` over the turn is its `usage` key, present only when the model reported it; `tools`
    are the tool steps the turn ran, in order (none known for a turn a worker ran)."""
    if outcome is None:
        return error_outcome(message_id, "the bot finished this message without an answer", turn_id=turn_id)
    response = outcome.outgoing_response
    reported = {} if usage is None else {"usage": {
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cache_read_tokens": usage.cache_read_tokens,
    }}
    return {
        "turn_id": turn_id,
        "message_id": message_id,
        "finish_reason": outcome.finish_reason.value,
        "text": None if response is None else response.text,
        "fallback": outcome.fallback,
        "failures": [user_safe(failure) for failure in outcome.failures],
        "approval": None if outcome.approval is None else {
            "approval_id": outcome.approval.approval_id, "tool": outcome.approval.tool, "arguments": outcome.approval.arguments,
        },
        "tools": [tool_step(execution) for execution in tools],
        **reported,
    }


def error_outcome(message_id: str, failure: str, *, turn_id: str | None = None) -> dict[str, Any]:
    """The Outcome of a turn that produced no answer, with `failure` as its one user-safe failure."""
    return _without_answer(FinishReason.ERROR, message_id, failure, turn_id)


def deadline_outcome(message_id: str, failure: str) -> dict[str, Any]:
    """The Outcome of a turn whose answer did not come in time."""
    return _without_answer(FinishReason.DEADLINE, message_id, failure, None)


def _without_answer(reason: FinishReason, message_id: str, failure: str, turn_id: str | None) -> dict[str, Any]:
    return {
        "turn_id": turn_id or message_id,
        "message_id": message_id,
        "finish_reason": reason.value,
        "text": None,
        "fallback": False,
        "failures": [failure],
        "approval": None,
        "tools": [],
    }
