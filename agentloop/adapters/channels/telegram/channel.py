"""`TelegramChannel`: a turn's text, voice and files sent to a Telegram chat, answers streamed into one message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, InputFile
from telegram.error import TelegramError

from agentloop.adapters.channels.telegram.chats import chat_of
from agentloop.adapters.channels.telegram._voice import ogg_opus
from agentloop.approvals import APPROVAL_HINT
from agentloop.context import Session
from agentloop.errors import TransportError
from agentloop.outcome import Attachment
from agentloop.ports.speech import Synthesizer

MESSAGE_LIMIT = 4096
"""The most characters Telegram shows in one message."""
CUT_OFF_MARK = " [cut off]"
"""Ends a streamed message that was withdrawn; the turn's fallback follows as a message of its own."""
APPROVE, DENY = "approve", "deny"
"""The callback data of an approval keyboard's buttons is `approve:ID` or `deny:ID`."""
T = TypeVar("T")


def approval_buttons(approval_id: str) -> InlineKeyboardMarkup:
    """Approve and Deny, under a message asking the user to decide on the tool call `approval_id`."""
    return InlineKeyboardMarkup([[
        InlineKeyboardButton("Approve", callback_data=f"{APPROVE}:{approval_id}"),
        InlineKeyboardButton("Deny", callback_data=f"{DENY}:{approval_id}"),
    ]])


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """`text` in messages of at most `limit` characters, cut between paragraphs where it can,
    else between lines, else between words, else anywhere."""
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        window = rest[: limit + 1]
        cut = next((at for sep in ("\n\n", "\n", " ") if (at := window.rfind(sep)) > 0), limit)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts


async def delivered(sending: Awaitable[T]) -> T:
    """What a Bot API call returned; a refusal or an unreachable Telegram is a `TransportError`."""
    try:
        return await sending
    except TelegramError as error:
        raise TransportError(f"Telegram did not take the message: {error.message}") from error


class TelegramChannel:
    """A `StreamingChannel` to Telegram chats through `bot` (python-telegram-bot's `Bot`).

    Text goes in messages of at most 4096 characters, split between paragraphs. Voice text is
    spoken by `synthesizer` and sent as a voice message (OGG/Opus), or sent as text when there is
    none. Images go as photos, other files as documents. A streamed answer is one message edited
    as it grows, at most once every `edit_interval` seconds, and last to the canonical text.
    A message asking for the user's approval (`APPROVAL_HINT`) comes with Approve and Deny buttons.
    """

    def __init__(
        self, bot: Bot, *, synthesizer: Synthesizer | None = None, edit_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bot = bot
        self.synthesizer = synthesizer
        self.edit_interval = edit_interval
        self.clock = clock

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        approval_id = hints.get(APPROVAL_HINT)
        await self.say(chat_of(session), text, buttons=None if approval_id is None else approval_buttons(approval_id))

    async def say(self, chat_id: int, text: str, *, buttons: InlineKeyboardMarkup | None = None) -> None:
        """Send `text` to the chat, in as many messages as its length takes; `buttons` go under the last."""
        parts = split_message(text)
        for number, part in enumerate(parts, 1):
            await delivered(self.bot.send_message(chat_id, part, reply_markup=buttons if number == len(parts) else None))

    async def send_voice(self, session: Session, text: str) -> None:
        if self.synthesizer is None:
            await self.send_text(session, text, {})
            return
        wav = await self.synthesizer.synthesize(text)
        voice = await asyncio.to_thread(ogg_opus, wav)
        await delivered(self.bot.send_voice(chat_of(session), InputFile(voice, filename="voice.ogg")))

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        chat_id = chat_of(session)
        document: str | InputFile = attachment.url or InputFile(attachment.data, filename=attachment.name)
        if attachment.media_type.startswith("image/"):
            await delivered(self.bot.send_photo(chat_id, document))
        else:
            await delivered(self.bot.send_document(chat_id, document, filename=attachment.name))

    async def open_stream(self, session: Session, hints: dict[str, str]) -> _StreamedMessage:
        return _StreamedMessage(self, chat_of(session))


class _StreamedMessage:
    """One answer shown in a Telegram message while the model writes it: sent with the first text, then edited."""

    def __init__(self, channel: TelegramChannel, chat_id: int) -> None:
        self._channel = channel
        self._chat_id = chat_id
        self._written = ""
        self._shown = ""
        self._message_id: int | None = None
        self._edited_at = 0.0

    async def delta(self, text: str) -> None:
        self._written += text
        if self._message_id is None or self._channel.clock() - self._edited_at >= self._channel.edit_interval:
            await self._show(self._written[:MESSAGE_LIMIT].strip())

    async def _show(self, text: str) -> None:
        if not text or text == self._shown:  # Telegram refuses an edit that changes nothing
            return
        bot = self._channel.bot
        if self._message_id is None:
            sent: Any = await delivered(bot.send_message(self._chat_id, text))
            self._message_id = sent.message_id
        else:
            await delivered(bot.edit_message_text(text, chat_id=self._chat_id, message_id=self._message_id))
        self._shown = text
        self._edited_at = self._channel.clock()

    async def close(self, final_text: str) -> None:
        first, *rest = split_message(final_text) or [""]
        await self._show(first)
        for part in rest:
            await delivered(self._channel.bot.send_message(self._chat_id, part))

    async def abort(self, reason: str) -> None:
        if self._message_id is not None:
            await self._show(f"{self._shown[: MESSAGE_LIMIT - len(CUT_OFF_MARK)]}{CUT_OFF_MARK}")
