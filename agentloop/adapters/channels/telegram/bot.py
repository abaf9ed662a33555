"""`TelegramBot`: a Telegram bot's updates made into turns, and its chat commands.

Each update is checked against the chat file first: a chat it does not list is told so and
nothing runs. Text is a turn, and so is a document or photo (attached to it); a voice message is transcribed into one (or the user is told voice
is not understood); `/good` and `/bad` rate the last answer, `/approve` and `/deny` (or the
buttons under an approval request) answer the oldest tool call awaiting approval, `/end` ends the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import attrs
from telegram import Update
from telegram.ext import Application, CallbackQueryHandler, CommandHandler, ContextTypes, MessageHandler, filters

from agentloop._log import get_logger
from agentloop.adapters.channels.telegram.channel import APPROVE, DENY, TelegramChannel, delivered
from agentloop.adapters.channels.telegram.chats import Chats
from agentloop.context import IncomingMessage, Session
from agentloop.errors import TransportError, TurnInProgressError
from agentloop.loop import AgentLoop
from agentloop.outcome import Attachment
from agentloop.notes import NoteTaking
from agentloop.ports import ApprovalStore
from agentloop.ports.speech import Transcriber
from agentloop.scopes import approval_scope

COMMANDS = ("start", "good", "bad", "approve", "deny", "end")
UNKNOWN_CHAT = "This chat may not talk to this bot. Ask its operator to add chat {chat} to the bot's chat file."
NO_VOICE = "I cannot understand voice messages here; please type your message."
BUSY = "I am still answering your last message; send this one again once the answer is in."
_log = get_logger("agentloop.telegram")

TurnRunner = Callable[[Session, IncomingMessage, str], Awaitable[str]]
"""Runs (or has a worker run) the turn of a message, given its session and a message id unique to the update;
returns the turn's id (what `/good` and `/bad` rate)."""


def direct_turns(loop: AgentLoop) -> TurnRunner:
    """Run each turn here, with `loop`."""

    async def run(session: Session, incoming: IncomingMessage, message_id: str) -> str:
        ctx = await loop.run_turn(session, incoming)
        return ctx.turn_id

    return run


def inbox_turns(inbox: Any, *, timeout: float = 150.0) -> TurnRunner:
    """Submit each turn to the workers' inbox (`agentloop.workers.Inbox`) under the update's message id, a chat's
    in the order they came, and wait for its outcome: an update two runners receive is one message, answered once."""

    from agentloop.workers import MessageNotAnsweredError

    submitting: dict[str, asyncio.Lock] = {}  # one per session of the chat file's chats

    async def run(session: Session, incoming: IncomingMessage, message_id: str) -> str:
        async with submitting.setdefault(session.id, asyncio.Lock()):  # a chat's messages reach the inbox in the order they came
            key: str = await inbox.submit(session, incoming, message_id=message_id)
        try:
            await inbox.wait(key, timeout=timeout)
        except MessageNotAnsweredError:  # kept in the inbox: a worker answers it when one is free
            _log.warning("telegram.answer_pending", session_id=session.id, message_id=message_id, waited=timeout)
        return key  # a worker names the turn by the message's key

    return run


@attrs.define
class _ChatState:
    """What the bot remembers of a chat between updates."""

    generation: int = 0
    """Sessions this chat ended with /end: the next session's id counts them."""
    last_turn: str | None = None
    satisfied: bool = True


class TelegramBot:
    """Answers the updates of `application` (python-telegram-bot) for the chats in `chats`, with turns run by `run`.

    `note_taking` records `/good`, `/bad` and ends sessions on `/end`; `approvals` holds the tool calls awaiting
    the user's decision; `transcriber` writes voice messages down (without one, the user is told to type).
    """

    def __init__(
        self, application: Application[Any, Any, Any, Any, Any, Any], channel: TelegramChannel, chats: Chats, run: TurnRunner, *,
        note_taking: NoteTaking | None = None, approvals: ApprovalStore | None = None, transcriber: Transcriber | None = None,
    ) -> None:
        self.application = application
        self.channel = channel
        self.chats = chats
        self.run = run
        self.note_taking = note_taking
        self.approvals = approvals
        self.transcriber = transcriber
        self._states: dict[str, _ChatState] = {}
        application.add_handler(CommandHandler(list(COMMANDS), self._on_command, block=False))
        application.add_handler(MessageHandler(filters.VOICE, self._on_voice, block=False))
        application.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, self._on_text, block=False))
        application.add_handler(MessageHandler(filters.Document.ALL | filters.PHOTO, self._on_file, block=False))
        application.add_handler(CallbackQueryHandler(self._on_button, block=False))
        application.add_error_handler(self._on_error)

    def _session(self, update: Update) -> tuple[int, Session | None, _ChatState]:
        """The chat of `update`, its current session (None for a chat the file does not list) and its state."""
        chat = update.effective_chat
        assert chat is not None  # every handler here is for messages and buttons, which have a chat
        user = update.effective_user
        base = self.chats.session(chat.id, user.id if user is not None else None)
        if base is None:
            return chat.id, None, _ChatState()
        state = self._states.setdefault(base.id, _ChatState())
        session = self.chats.session(chat.id, user.id if user is not None else None, state.generation)
        return chat.id, session, state

    async def _refused(self, chat_id: int) -> None:
        _log.warning("telegram.unknown_chat", chat_id=chat_id)
        await self.channel.say(chat_id, UNKNOWN_CHAT.format(chat=chat_id))

    async def _on_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat_id, session, state = self._session(update)
        if session is None:
            await self._refused(chat_id)
        elif message is not None and message.text:
            await self._turn(chat_id, session, state, IncomingMessage(message.text), f"{chat_id}:{message.message_id}")

    async def _on_voice(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat_id, session, state = self._session(update)
        if session is None:
            await self._refused(chat_id)
            return
        if self.transcriber is None or message is None or message.voice is None:
            await self.channel.say(chat_id, NO_VOICE)
            return
        voice = await delivered(message.voice.get_file())
        audio = bytes(await delivered(voice.download_as_bytearray()))
        text = await self.transcriber.transcribe(audio, message.voice.mime_type or "audio/ogg")
        await self._turn(chat_id, session, state, IncomingMessage(text, metadata={"voice": "true"}), f"{chat_id}:{message.message_id}")

    async def _on_file(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A document or photo: its bytes go with the turn as an attachment, its caption as the text."""
        message = update.effective_message
        chat_id, session, state = self._session(update)
        if session is None:
            await self._refused(chat_id)
            return
        if message is None:
            return
        if message.document is not None:
            sent: Any = message.document
            name, media_type = message.document.file_name or "document", message.document.mime_type or "application/octet-stream"
        elif message.photo:
            sent, name, media_type = message.photo[-1], "photo.jpg", "image/jpeg"  # the largest size Telegram made
        else:
            return
        data = bytes(await delivered((await delivered(sent.get_file())).download_as_bytearray()))
        incoming = IncomingMessage(message.caption or "", attachments=(Attachment(name, media_type, data),))
        await self._turn(chat_id, session, state, incoming, f"{chat_id}:{message.message_id}")

    async def _on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat_id, session, state = self._session(update)
        if session is None:
            await self._refused(chat_id)
            return
        if message is None or not message.text:
            return
        command, _, note = message.text.partition(" ")
        name = command.lstrip("/").partition("@")[0]
        if name in ("good", "bad"):
            await self._feedback(chat_id, session, state, positive=name == "good")
        elif name in ("approve", "deny"):
            await self._decide(chat_id, session, state, None, approved=name == "approve", note=note.strip() or None,
                               message_id=f"{chat_id}:{message.message_id}")
        elif name == "end":
            await self._end(chat_id, session, state)
        else:
            await self.channel.say(chat_id, "Hello! Send me a message and I will answer.")

    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None  # the handler is for callback queries only
        await delivered(query.answer())
        chat_id, session, state = self._session(update)
        if session is None:
            await self._refused(chat_id)
            return
        choice, _, approval_id = (query.data or "").partition(":")
        if choice not in (APPROVE, DENY) or not approval_id:
            return
        asked = getattr(query.message, "text", None) or ""
        await delivered(query.edit_message_text(f"{asked}\n{'Approved' if choice == APPROVE else 'Denied'}".strip()))  # the buttons go
        await self._decide(chat_id, session, state, approval_id, approved=choice == APPROVE, note=None,
                           message_id=f"{chat_id}:button:{query.id}")

    async def _turn(self, chat_id: int, session: Session, state: _ChatState, incoming: IncomingMessage, message_id: str) -> None:
        try:
            turn_id = await self.run(session, incoming, f"telegram:{message_id}")
        except TurnInProgressError:
            await self.channel.say(chat_id, BUSY)
            return
        state.last_turn = turn_id

    async def _decide(
        self, chat_id: int, session: Session, state: _ChatState, approval_id: str | None, *, approved: bool, note: str | None,
        message_id: str,
    ) -> None:
        """Answer the tool call `approval_id` (the session's oldest awaiting one when None) with a turn."""
        if approval_id is None:
            waiting = [] if self.approvals is None else await self.approvals.pending(approval_scope(session), session.id)
            if not waiting:
                await self.channel.say(chat_id, "No tool call awaits your approval in this chat.")
                return
            approval_id = waiting[0].request.approval_id
        await self._turn(chat_id, session, state, IncomingMessage.approval(approval_id, approved=approved, note=note), message_id)

    async def _feedback(self, chat_id: int, session: Session, state: _ChatState, *, positive: bool) -> None:
        if self.note_taking is None:
            await self.channel.say(chat_id, "This bot does not record feedback.")
            return
        if state.last_turn is None:
            await self.channel.say(chat_id, "Nothing to rate yet: /good and /bad rate my last answer.")
            return
        state.satisfied = positive
        await self.note_taking.record_feedback(session, positive=positive, turn_id=state.last_turn)
        await self.channel.say(chat_id, f"Thanks: feedback recorded ({'good' if positive else 'bad'}).")

    async def _end(self, chat_id: int, session: Session, state: _ChatState) -> None:
        if self.note_taking is not None and state.last_turn is not None:
            await self.note_taking.end_session(session, success=state.satisfied)
        state.generation += 1
        state.last_turn, state.satisfied = None, True
        await self.channel.say(chat_id, "Session ended; your next message starts a new one.")

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A handler failed: logged; a user whose message it was is told, when Telegram can still be reached."""
        _log.error("telegram.update_failed", exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None and not isinstance(context.error, TransportError):
            try:
                await self.channel.say(update.effective_chat.id, "Sorry, something went wrong with that message; please try again.")
            except TransportError:
                pass


@attrs.frozen
class Webhook:
    """Receive updates over HTTPS instead of polling: Telegram posts them to `url` (public, behind your TLS
    proxy), which reaches this process at `listen`:`port` on the same path; `secret` proves a post is Telegram's."""

    url: str
    listen: str = "127.0.0.1"
    port: int = 8443
    secret: str | None = None


def telegram_application(token: str, *, base_url: str | None = None, base_file_url: str | None = None) -> Application[Any, Any, Any, Any, Any, Any]:
    """python-telegram-bot's `Application` for the bot of `token`, on the Bot API at `base_url` (Telegram's when None),
    handling updates of different chats at once."""
    builder = Application.builder().token(token).concurrent_updates(True)
    if base_url is not None:
        builder = builder.base_url(base_url)
    if base_file_url is not None:
        builder = builder.base_file_url(base_file_url)
    return builder.build()


async def run_until(bot: TelegramBot, stop: asyncio.Event, *, webhook: Webhook | None = None, poll_timeout: int = 10) -> None:
    """Answer the bot's updates, by long polling or at `webhook`, until `stop` is set; then the updates in hand are finished."""
    application = bot.application
    updater = application.updater
    assert updater is not None  # telegram_application builds one
    async with application:
        await application.start()
        try:
            if webhook is None:
                await updater.start_polling(timeout=poll_timeout)
            else:
                await updater.start_webhook(
                    listen=webhook.listen, port=webhook.port, url_path=urlsplit(webhook.url).path.lstrip("/"),
                    webhook_url=webhook.url, secret_token=webhook.secret,
                )
            await stop.wait()
        finally:
            if updater.running:
                await updater.stop()
            await application.stop()
