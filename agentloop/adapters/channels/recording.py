"""`RecordingChannel`: a streaming Channel that keeps what it was asked to send, and can fail."""

from __future__ import annotations

from typing import Literal

import attrs

from agentloop.context import Session
from agentloop.errors import TransportError
from agentloop.outcome import Attachment
from agentloop.ports.channel import MessageStream

SendKind = Literal["text", "voice", "attachment", "delta"]


@attrs.frozen
class Sent:
    """One delivery the channel made."""

    kind: SendKind
    session_id: str
    text: str | None = None
    attachment: Attachment | None = None
    hints: dict[str, str] = attrs.field(factory=dict, hash=False)


@attrs.define
class RecordedStream:
    """One streamed message: the deltas shown, then the text it was closed with or why it was aborted."""

    session_id: str
    hints: dict[str, str]
    deltas: list[str] = attrs.Factory(list)
    closed: str | None = None
    aborted: str | None = None

    @property
    def shown(self) -> str:
        """What the user saw while it streamed."""
        return "".join(self.deltas)


class _Stream:
    """The `MessageStream` a RecordingChannel opens: it writes into one `RecordedStream`."""

    def __init__(self, channel: RecordingChannel, record: RecordedStream) -> None:
        self._channel = channel
        self._record = record

    async def delta(self, text: str) -> None:
        self._channel._fail_if("delta")
        self._record.deltas.append(text)

    async def close(self, final_text: str) -> None:
        self._channel._deliver(Sent("text", self._record.session_id, text=final_text, hints=dict(self._record.hints)))
        self._record.closed = final_text

    async def abort(self, reason: str) -> None:
        self._record.aborted = reason


class RecordingChannel:
    """Records every send in `sent`; `fail_with(...)` makes sends raise instead.

    `fail_with(error, kinds=("text",), times=1)` fails only text sends, once. A failed
    send is not recorded (it did not happen) but is counted in `failed`. It streams:
    each opened message is kept in `streams`, and closing one is its text send (in
    `sent` and `texts`); `kinds=("delta",)` fails the deltas.
    """

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.failed: list[SendKind] = []
        self.streams: list[RecordedStream] = []
        self._error: BaseException | None = None
        self._kinds: frozenset[SendKind] = frozenset()
        self._times: int | None = None

    def fail_with(
        self,
        error: BaseException | None = None,
        *,
        kinds: tuple[SendKind, ...] = ("text", "voice", "attachment"),
        times: int | None = None,
    ) -> None:
        """Make the next sends of `kinds` raise `error` (a TransportError by default)."""
        self._error = error if error is not None else TransportError("the chat service is unreachable")
        self._kinds = frozenset(kinds)
        self._times = times

    def recover(self) -> None:
        """Deliver normally again."""
        self._error = None

    def _fail_if(self, kind: SendKind) -> None:
        if self._error is not None and kind in self._kinds:
            error = self._error
            if self._times is not None:
                self._times -= 1
                if self._times <= 0:
                    self._error = None
            self.failed.append(kind)
            raise error

    def _deliver(self, item: Sent) -> None:
        self._fail_if(item.kind)
        self.sent.append(item)

    async def open_stream(self, session: Session, hints: dict[str, str]) -> MessageStream:
        record = RecordedStream(session.id, dict(hints))
        self.streams.append(record)
        return _Stream(self, record)

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self._deliver(Sent("text", session.id, text=text, hints=dict(hints)))

    async def send_voice(self, session: Session, text: str) -> None:
        self._deliver(Sent("voice", session.id, text=text))

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        self._deliver(Sent("attachment", session.id, attachment=attachment))

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.sent if s.kind == "text" and s.text is not None]

    @property
    def voices(self) -> list[str]:
        return [s.text for s in self.sent if s.kind == "voice" and s.text is not None]

    @property
    def attachments(self) -> list[Attachment]:
        return [s.attachment for s in self.sent if s.attachment is not None]
