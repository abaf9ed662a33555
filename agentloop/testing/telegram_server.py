"""`FakeBotApi`: a local server speaking the Telegram Bot API methods a bot uses, to drive python-telegram-bot end to end.

    with FakeBotApi() as api:
        application = telegram_application(TOKEN, base_url=api.base_url, base_file_url=api.base_file_url)
        api.user_says(CHAT, "hello")
        ...
        api.chat(CHAT)  # what the user's chat shows: each message the bot sent, as last edited

Updates reach the bot by `getUpdates` (long polling), or are posted to the URL `setWebhook` gave. It serves
getMe, getUpdates, setWebhook, deleteWebhook, sendMessage, editMessageText, sendVoice, sendDocument, sendPhoto,
answerCallbackQuery, getFile and file downloads. Imported separately: it needs the serve extra (starlette, uvicorn)
and the telegram extra (python-telegram-bot, which brings httpx).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from typing import Any

import attrs
import httpx
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentloop.testing.serve import served

__all__ = ["BOT_ID", "FakeBotApi", "Shown"]

BOT_ID = 4242
_POLL_STEP = 0.02


@attrs.define
class Shown:
    """One message the bot put in a chat, as the chat shows it now: its kind, text (a caption for files),
    the bytes of a voice message, document or photo, its buttons as (label, callback data), and its edits."""

    message_id: int
    kind: str
    text: str | None = None
    data: bytes | None = None
    file_name: str | None = None
    buttons: list[tuple[str, str]] = attrs.Factory(list)
    edits: int = 0


class FakeBotApi:
    """The Bot API on a loopback port: the updates a test queues, and the chats as the bot's calls leave them."""

    def __init__(self, token: str = "123456:TEST-TOKEN", *, every_webhook: bool = False) -> None:
        self.token = token
        self.every_webhook = every_webhook
        """Post each update to every webhook ever set, as Telegram's redelivery can reach another runner behind a balancer."""
        self.webhooks: list[str] = []
        self.calls: list[str] = []
        """Each Bot API method called, in order."""
        self.answered_callbacks: list[str] = []
        self.webhook: str | None = None
        self.webhook_secret: str | None = None
        self._updates: list[dict[str, Any]] = []
        self._next_update = 1
        self._next_message = 1000
        self._chats: dict[int, list[Shown]] = {}
        self._files: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self.url = ""

    def __enter__(self) -> FakeBotApi:
        routes = [
            Route("/bot{token}/{method}", self._method, methods=["GET", "POST"]),
            Route("/file/bot{token}/{path:path}", self._download, methods=["GET"]),
        ]
        self.url = self._stack.enter_context(served(Starlette(routes=routes, lifespan=self._lifespan)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def base_url(self) -> str:
        """What python-telegram-bot's `base_url` takes (the token follows it)."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        return f"{self.url}/file/bot"

    # what a user does

    def user_says(self, chat_id: int, text: str, *, user_id: int | None = None) -> int:
        """The user sends `text` in the chat (a command when it starts with /); returns its message id."""
        message = self._message(chat_id, user_id, text=text)
        if text.startswith("/"):
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split(" ")[0])}]
        self._queue({"message": message})
        return int(message["message_id"])

    def user_speaks(self, chat_id: int, audio: bytes, *, user_id: int | None = None, duration: int = 1) -> int:
        """The user sends a voice message of `audio` (OGG/Opus); returns its message id."""
        file_id = f"voice-{len(self._files)}"
        with self._lock:
            self._files[file_id] = audio
        voice = {"file_id": file_id, "file_unique_id": file_id, "duration": duration, "mime_type": "audio/ogg", "file_size": len(audio)}
        message = self._message(chat_id, user_id, voice=voice)
        self._queue({"message": message})
        return int(message["message_id"])

    def user_sends_file(self, chat_id: int, data: bytes, name: str, media_type: str, *, caption: str | None = None,
                        user_id: int | None = None) -> int:
        """The user sends a document; returns its message id."""
        file_id = f"document-{len(self._files)}"
        with self._lock:
            self._files[file_id] = data
        document = {"file_id": file_id, "file_unique_id": file_id, "file_name": name, "mime_type": media_type, "file_size": len(data)}
        message = self._message(chat_id, user_id, document=document, **({"caption": caption} if caption else {}))
        self._queue({"message": message})
        return int(message["message_id"])

    def user_presses(self, chat_id: int, message_id: int, data: str, *, user_id: int | None = None) -> None:
        """The user presses the button with callback `data` under the bot's message `message_id`."""
        shown = next(m for m in self.chat(chat_id) if m.message_id == message_id)
        query = {"id": f"cb{self._next_update}", "from": _user(user_id or chat_id), "chat_instance": str(chat_id), "data": data,
                 "message": {"message_id": message_id, "date": int(time.time()), "chat": _chat(chat_id), "text": shown.text,
                             "from": _user(BOT_ID, bot=True)}}
        self._queue({"callback_query": query})

    # what the chat shows

    def chat(self, chat_id: int) -> list[Shown]:
        """The bot's messages in the chat, in the order sent, each as last edited."""
        with self._lock:
            return [attrs.evolve(m) for m in self._chats.get(chat_id, [])]

    def texts(self, chat_id: int) -> list[str]:
        return [m.text for m in self.chat(chat_id) if m.text is not None and m.kind == "text"]

    def pending(self) -> int:
        """How many updates the bot (every webhook, with `every_webhook`) has not taken yet."""
        return len(self._take(0))

    def wait_for(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        """Return once `condition()` holds; `TimeoutError` after `timeout` seconds (what the chat shows in its message)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the chats never got there; they show {self._chats!r}, calls {self.calls}")
            time.sleep(_POLL_STEP)

    async def until(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        """`wait_for` for a test running an event loop (the bot's) in this thread."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the chats never got there; they show {self._chats!r}, calls {self.calls}")
            await asyncio.sleep(_POLL_STEP)

    # the server

    def _message(self, chat_id: int, user_id: int | None, **content: Any) -> dict[str, Any]:
        with self._lock:
            self._next_message += 1
            number = self._next_message
        return {"message_id": number, "date": int(time.time()), "chat": _chat(chat_id), "from": _user(user_id or chat_id), **content}

    def _queue(self, update: dict[str, Any]) -> None:
        with self._lock:
            self._updates.append({"update_id": self._next_update, **update})
            self._next_update += 1

    def _take(self, offset: int) -> list[dict[str, Any]]:
        with self._lock:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
            return list(self._updates)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        pusher = asyncio.get_running_loop().create_task(self._push())
        yield
        pusher.cancel()

    async def _push(self) -> None:
        """Post queued updates to the webhook, once one is set (as Telegram does, again until it is taken);
        with `every_webhook`, to every webhook set so far, each update taken once all have taken it."""
        async with httpx.AsyncClient() as client:
            while True:
                await asyncio.sleep(_POLL_STEP)
                targets = list(self.webhooks) if self.every_webhook else [self.webhook] if self.webhook else []
                if targets:
                    await self._post_all(client, targets)

    async def _post_all(self, client: httpx.AsyncClient, targets: list[str]) -> None:
        headers = {"X-Telegram-Bot-Api-Secret-Token": self.webhook_secret} if self.webhook_secret else {}
        for update in self._take(0):
            taken = update.setdefault("_taken_by", set())
            for target in targets:
                if target in taken:
                    continue
                body = {key: value for key, value in update.items() if key != "_taken_by"}
                try:
                    response = await client.post(target, json=body, headers=headers)
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    taken.add(target)
            if not set(targets) - taken:
                self._take(update["update_id"] + 1)

    async def _method(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return JSONResponse({"ok": False, "error_code": 401, "description": "Unauthorized"}, status_code=401)
        method = request.path_params["method"]
        self.calls.append(method)
        form = await request.form()
        params: dict[str, Any] = {}
        names: dict[str, str | None] = {}
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                params[key], names[key] = await value.read(), value.filename
            else:
                params[key] = value
        params["_file_names"] = names
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return JSONResponse({"ok": False, "error_code": 404, "description": f"Not Found: method {method}"}, status_code=404)
        result = await handler(params)
        if isinstance(result, Response):
            return result
        return JSONResponse({"ok": True, "result": result})

    async def _getMe(self, params: dict[str, Any]) -> Any:
        return {**_user(BOT_ID, bot=True), "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    async def _getUpdates(self, params: dict[str, Any]) -> Any:
        offset, timeout = int(params.get("offset") or 0), float(params.get("timeout") or 0)
        deadline = time.monotonic() + min(timeout, 1.0)
        while True:
            updates = self._take(offset)
            if updates or time.monotonic() >= deadline:
                return updates
            await asyncio.sleep(_POLL_STEP)

    async def _setWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook, self.webhook_secret = params["url"], params.get("secret_token")
        self.webhooks.append(params["url"])
        return True

    async def _deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = None
        return True

    async def _sendMessage(self, params: dict[str, Any]) -> Any:
        return self._sent(params, Shown(0, "text", text=params["text"], buttons=_buttons(params.get("reply_markup"))))

    async def _editMessageText(self, params: dict[str, Any]) -> Any:
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        with self._lock:
            shown = next((m for m in self._chats.get(chat_id, []) if m.message_id == message_id), None)
            if shown is None or shown.text == params["text"]:
                problem = "message to edit not found" if shown is None else "message is not modified"
                return JSONResponse({"ok": False, "error_code": 400, "description": f"Bad Request: {problem}"}, status_code=400)
            shown.text, shown.buttons, shown.edits = params["text"], _buttons(params.get("reply_markup")), shown.edits + 1
        return self._message_json(chat_id, shown)

    async def _sendVoice(self, params: dict[str, Any]) -> Any:
        return self._sent(params, self._file(params, "voice", params["voice"]))

    async def _sendDocument(self, params: dict[str, Any]) -> Any:
        return self._sent(params, self._file(params, "document", params["document"]))

    async def _sendPhoto(self, params: dict[str, Any]) -> Any:
        return self._sent(params, self._file(params, "photo", params["photo"]))

    async def _answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        self.answered_callbacks.append(params["callback_query_id"])
        return True

    async def _getFile(self, params: dict[str, Any]) -> Any:
        file_id = params["file_id"]
        return {"file_id": file_id, "file_unique_id": file_id, "file_size": len(self._files[file_id]), "file_path": f"files/{file_id}.bin"}

    async def _download(self, request: Request) -> Response:
        file_id = request.path_params["path"].rpartition("/")[2].partition(".")[0]
        return Response(self._files[file_id], media_type="application/octet-stream")

    def _file(self, params: dict[str, Any], kind: str, sent: Any) -> Shown:
        """A file the bot sent: its bytes when uploaded (`attach://name` names the part), its URL's text when linked."""
        part = kind
        if isinstance(sent, str) and sent.startswith("attach://"):
            part = sent.removeprefix("attach://")
            sent = params[part]
        data = sent if isinstance(sent, bytes) else None
        return Shown(0, kind, text=params.get("caption") or (sent if isinstance(sent, str) else None), data=data,
                     file_name=params["_file_names"].get(part))

    def _sent(self, params: dict[str, Any], shown: Shown) -> Any:
        chat_id = int(params["chat_id"])
        with self._lock:
            self._next_message += 1
            shown.message_id = self._next_message
            self._chats.setdefault(chat_id, []).append(shown)
        return self._message_json(chat_id, shown)

    def _message_json(self, chat_id: int, shown: Shown) -> dict[str, Any]:
        message: dict[str, Any] = {"message_id": shown.message_id, "date": int(time.time()), "chat": _chat(chat_id), "from": _user(BOT_ID, bot=True)}
        if shown.kind == "text":
            message["text"] = shown.text
        elif shown.kind == "voice":
            message["voice"] = {"file_id": "v", "file_unique_id": "v", "duration": 1}
        elif shown.kind == "photo":
            message["photo"] = [{"file_id": "p", "file_unique_id": "p", "width": 1, "height": 1}]
        else:
            message["document"] = {"file_id": "d", "file_unique_id": "d", "file_name": shown.file_name}
        return message


def _chat(chat_id: int) -> dict[str, Any]:
    return {"id": chat_id, "type": "private" if chat_id > 0 else "group", "first_name": "User", "title": "Group"}


def _user(user_id: int, *, bot: bool = False) -> dict[str, Any]:
    return {"id": user_id, "is_bot": bot, "first_name": "Bot" if bot else "User", "username": "agentloop_bot" if bot else f"user{user_id}"}


def _buttons(markup: Any) -> list[tuple[str, str]]:
    if not markup:
        return []
    rows = json.loads(markup)["inline_keyboard"] if isinstance(markup, str) else markup["inline_keyboard"]
    return [(button["text"], button.get("callback_data", "")) for row in rows for button in row]
