"""The typed contracts of a finished turn and the one converter that serialises them."""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
import attrs
import cattrs

from agentloop.approvals import ApprovalRequest


class FinishReason(enum.Enum):
    """Why a turn ended. See `resolve_finish_reason` for which one wins."""

    SUCCESS = "success"
    ERROR = "error"
    ITERATION_LIMIT = "iteration_limit"
    DEADLINE = "deadline"
    POLICY_DENIED = "policy_denied"
    PLAN_MODE = "plan_mode"
    AWAITING_APPROVAL = "awaiting_approval"
    INTERRUPTED = "interrupted"
    """A newer message of the session stopped the turn at a safe point (the `interrupt` mid-turn policy)."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A token or cost budget (the turn's, the session's or the tenant's) would be passed by the next model call or is used up."""


class FailureSource(enum.Enum):
    SYSTEM = "system"
    LLM = "llm"
    TOOL = "tool"
    TRANSPORT = "transport"


class FailureKind(enum.Enum):
    EXCEPTION = "exception"
    TIMEOUT = "timeout"
    VALIDATION = "validation"
    POLICY = "policy"
    RATE_LIMIT = "rate_limit"
    UNAVAILABLE = "unavailable"
    """A store or service the turn needed could not be reached: running it again may succeed."""
    UNKNOWN = "unknown"


# I8: most severe first (docs/adr/0003-finish-reason-priority.md, docs/adr/0025-budgets.md).
FINISH_REASON_PRIORITY: tuple[FinishReason, ...] = (
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
_RANK = {reason: rank for rank, reason in enumerate(FINISH_REASON_PRIORITY)}


def resolve_finish_reason(reasons: Iterable[FinishReason]) -> FinishReason:
    """The one finish reason of a turn given every reason observed in it (I8).

    DEADLINE > BUDGET_EXCEEDED > ITERATION_LIMIT > POLICY_DENIED > AWAITING_APPROVAL > ERROR > INTERRUPTED > PLAN_MODE
    > SUCCESS; no reason at all means SUCCESS.
    """
    return min(reasons, key=_RANK.__getitem__, default=FinishReason.SUCCESS)


def visible_text(text: str | None) -> str | None:
    """`text` when it holds something a user would see; None when it is absent or only whitespace."""
    return text if text and not text.isspace() else None


def copy_str_dict(value: Mapping[str, str] | None) -> dict[str, str]:
    """A private copy of a string mapping, so a caller's later edits never reach a contract."""
    return dict(value or {})


@attrs.frozen
class Attachment:
    """A file sent or received with a message: inline `data` or a `url`."""

    name: str
    media_type: str = "application/octet-stream"
    data: bytes = b""
    url: str | None = None


@attrs.frozen
class FailureEvent:
    """One thing that went wrong in a turn, structured instead of a string key."""

    source: FailureSource
    component: str
    kind: FailureKind
    message: str
    timestamp: datetime


@attrs.frozen
class OutgoingResponse:
    """What the transport sends: text, voice (its own field, never a flag) and files."""

    text: str | None = None
    voice_text: str | None = None
    attachments: tuple[Attachment, ...] = ()
    hints: dict[str, str] = attrs.field(factory=dict, converter=copy_str_dict, hash=False)

    @classmethod
    def text_only(cls, text: str) -> OutgoingResponse:
        return cls(text=text)

    @classmethod
    def voice_only(cls, text: str) -> OutgoingResponse:
        return cls(voice_text=text)

    @property
    def is_empty(self) -> bool:
        """True when there is nothing a user would see or hear (whitespace-only text counts as none)."""
        return not (visible_text(self.text) or visible_text(self.voice_text) or self.attachments)


@attrs.frozen
class RoutingOutcome:
    """What the transport did with the turn's response."""

    attempted: bool = False
    sent_text: bool = False
    sent_voice: bool = False
    sent_attachments: int = 0
    error_message: str | None = None

    @property
    def delivered(self) -> bool:
        return self.sent_text or self.sent_voice or self.sent_attachments > 0


@attrs.frozen
class TurnOutcome:
    """The single source of truth about a finished turn.

    `assistant_text` is what memory and RAG store (whitespace-only text becomes None:
    it is no answer); `outgoing_response` is what the transport sends. A user-facing
    (non-auto) turn must have an outgoing response. A turn that ended waiting for the
    user to approve a tool call carries that `approval`. A turn whose history or memory
    write did not land has `writes_lost` and is never SUCCESS (I15).
    """

    finish_reason: FinishReason
    assistant_text: str | None = attrs.field(default=None, converter=visible_text)
    outgoing_response: OutgoingResponse | None = None
    failures: tuple[FailureEvent, ...] = ()
    raw_history_written: bool = False
    model: str | None = None
    auto_mode: bool = False
    routing_outcome: RoutingOutcome | None = None
    fallback: bool = False
    approval: ApprovalRequest | None = None
    writes_lost: bool = False

    def __attrs_post_init__(self) -> None:
        if self.writes_lost and self.finish_reason is FinishReason.SUCCESS:
            raise ValueError(
                "a TurnOutcome whose writes were lost cannot be SUCCESS (I15); "
                "give it resolve_finish_reason((finish_reason, FinishReason.ERROR))"
            )
        if not self.auto_mode and self.outgoing_response is None:
            raise ValueError(
                "a user-facing TurnOutcome needs an outgoing_response; "
                "pass auto_mode=True for turns that send nothing"
            )


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(datetime, datetime.isoformat)
    conv.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))
    conv.register_unstructure_hook(bytes, lambda value: base64.b64encode(value).decode("ascii"))
    conv.register_structure_hook(bytes, lambda value, _: base64.b64decode(value))
    return conv


converter: cattrs.Converter = _make_converter()
"""The one cattrs converter: `unstructure` gives JSON-safe data, `structure` reverses it."""

