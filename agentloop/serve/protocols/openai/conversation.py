"""What the chat completions and responses endpoints share: the error shape, the session a request names (or a new
one seeded with the request's messages), the `/approve` and `/deny` commands, and the reply drawn from an Outcome."""

from __future__ import annotations

from typing import Any

import attrs
from starlette.responses import JSONResponse, Response

from agentloop._names import new_id
from agentloop.context import IncomingMessage, Session
from agentloop.messages import ChatMessage, Role
from agentloop.scopes import approval_scope, history_scope
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.requests import field, message_text
from agentloop.serve.server import Server
from agentloop.serve.turns import StartedTurn, start_turn

SESSION_HEADER = "X-Agentloop-Session"
"""The request header naming the caller's session to continue, and the response header naming the turn's session."""
_ROLES = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT}
_TEXT_PARTS = ("text", "input_text", "output_text")
_ERROR_TYPES = {401: "authentication_error", 429: "rate_limit_error"}


def openai_error(error: ApiError) -> Response:
    """An error in the OpenAI API's shape, `{"error": {"message", "type", "param", "code"}}`, with our status and headers."""
    kind = _ERROR_TYPES.get(error.status, "server_error" if error.status >= 500 else "invalid_request_error")
    body = {"error": {"message": error.message, "type": kind, "param": None, "code": error.code}}
    return JSONResponse(body, error.status, headers=error.headers)


def error_body(error: ApiError) -> dict[str, Any]:
    """The JSON of `openai_error`, for an error sent inside a stream."""
    return {"error": {"message": error.message, "type": "server_error" if error.status >= 500 else "invalid_request_error",
                      "param": None, "code": error.code}}


def check_model(server: Server, body: dict[str, Any]) -> str:
    """The request's `model`, which must be the bot this server hosts (404 otherwise, as OpenAI answers an unknown model)."""
    model: str = field(body, "model", str)
    if model != server.settings.bot:
        raise ApiError(404, "model_not_found", f"there is no model {model!r} here; this server hosts the bot {server.settings.bot!r}")
    return model


@attrs.frozen
class Asked:
    """What a request asks: the session it names (None: a new one) and where it named it, the messages before the
    last, and the last one's text."""

    named: tuple[str, str] | None
    history: tuple[ChatMessage, ...]
    text: str


def named_session(candidates: list[tuple[str, Any]]) -> tuple[str, str] | None:
    """(where, session id) of the one session the request's `(where, id)` candidates name (None: none); 422 when two
    name different sessions or one is not a string."""
    named = [(where, value) for where, value in candidates if value is not None]
    if any(not isinstance(value, str) for _, value in named):
        raise ApiError(422, "invalid", f"{', '.join(where for where, _ in named)} must be a string")
    if len({value for _, value in named}) > 1:
        raise ApiError(422, "invalid", f"{named[0][0]} and {named[1][0]} name different sessions; name one")
    return named[0] if named else None


def messages(server: Server, items: list[Any], where: str) -> tuple[tuple[ChatMessage, ...], str]:
    """The conversation `items` (chat messages or responses input messages) as history and the last (user) message's text;
    422 for a role or content the bot does not take, a conversation that does not end with the user, or one too long."""
    if not items:
        raise ApiError(422, "invalid", f"{where} is empty; send at least the user's message")
    if len(items) > server.settings.history_limit:
        raise ApiError(422, "invalid", f"{where} holds {len(items)} messages; the limit is {server.settings.history_limit}")
    history = tuple(_message(server, item, f"{where}[{number}]") for number, item in enumerate(items))
    last = history[-1]
    if last.role is not Role.USER:
        raise ApiError(422, "invalid", f"the last of {where} must be the user's message (role user)")
    return history[:-1], message_text(server, last.content or "")


def _message(server: Server, item: Any, where: str) -> ChatMessage:
    if not isinstance(item, dict):
        raise ApiError(422, "invalid", f"{where} must be a message object with a role and a content")
    role, kind = item.get("role"), item.get("type", "message")
    if role in ("tool", "function") or item.get("tool_calls") or (isinstance(kind, str) and "call" in kind):
        raise ApiError(422, "invalid", f"{where} is a tool call or result; the bot runs its own tools, so send only "
                                       "system, developer, user and assistant messages with text")
    if kind != "message":
        raise ApiError(422, "invalid", f"{where} is a {kind!r} item; send messages (type message) only")
    if role not in _ROLES:
        raise ApiError(422, "invalid", f"{where} has the role {role!r}; the roles taken are system, developer, user and assistant")
    text = _text(item.get("content"), where)
    if len(text) > server.settings.max_message_chars:
        raise ApiError(422, "invalid", f"{where} is {len(text)} characters long; the limit is {server.settings.max_message_chars}")
    return ChatMessage(_ROLES[role], text)


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts (their texts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) and part.get("type") in _TEXT_PARTS for part in content):
        texts = [part.get("text") for part in content]
        if all(isinstance(text, str) for text in texts):
            return "".join(texts)
    raise ApiError(422, "invalid", f"{where}'s content must be a string or a list of text parts; images, audio and files are not taken")


@attrs.frozen
class Begun:
    """A turn started for a request: its session, the message id it was sent under, and the running turn."""

    session: Session
    message_id: str
    turn: StartedTurn


async def begin(server: Server, caller: Caller, asked: Asked, *, instructions: str | None = None) -> Begun:
    """Start the turn `asked` for: in the caller's named session (404 when it is not theirs), or in a new session whose
    history is `instructions` (a system message) and the messages before the last; the text `/approve` or `/deny`
    decides a pending tool call instead."""
    if asked.named is not None:
        where, session_id = asked.named
        if not server.tokens.owns(caller, session_id):
            raise ApiError(404, "not_found", f"{where} names no session of this token; send the messages without it to start a new one")
        session = caller.session(session_id)
    else:
        session = caller.session(server.tokens.new_session_id(caller))
        seeded = ((ChatMessage.system(instructions),) if instructions else ()) + asked.history
        if seeded:
            await server.running.stores.sessions.append(history_scope(session), seeded)
    incoming = await _decision(server, session, asked.text) or IncomingMessage(asked.text)
    message_id = new_id()
    return Begun(session, message_id, await start_turn(server, session, incoming, message_id))


async def _decision(server: Server, session: Session, text: str) -> IncomingMessage | None:
    """The user's decision when `text` is `/approve [ID [NOTE]]` or `/deny [ID [NOTE]]` (ID may be left out when one
    tool call awaits); None for any other text. 404 when no such call awaits, 422 when several do and none is named."""
    words = text.split(maxsplit=2)
    if words[0] not in ("/approve", "/deny"):
        return None
    scope = approval_scope(session)
    pending = [waiting.request.approval_id for waiting in await server.running.stores.approvals.pending(scope, session.id)]
    if len(words) > 1 and words[1] not in pending:
        raise ApiError(404, "not_found", f"no tool call awaits approval {words[1]!r} in this session; it may have been decided already")
    if len(words) == 1 and not pending:
        raise ApiError(404, "not_found", "no tool call awaits approval in this session")
    if len(words) == 1 and len(pending) > 1:
        raise ApiError(422, "invalid", f"several tool calls await approval ({', '.join(pending)}); name one: {words[0]} <approval_id>")
    chosen = words[1] if len(words) > 1 else pending[0]
    return IncomingMessage.approval(chosen, approved=words[0] == "/approve", note=words[2] if len(words) > 2 else None)


def reply_text(outcome: dict[str, Any]) -> str:
    """What the assistant says for an Outcome: its text, or which failures kept the bot from answering."""
    text: str | None = outcome["text"]
    if text is not None:
        return text
    return "The bot could not answer: " + ("; ".join(outcome["failures"]) or "no answer came") + "."


def metadata(session: Session, outcome: dict[str, Any]) -> dict[str, str]:
    """The agentloop facts of a reply, as OpenAI's string-to-string metadata: the session to continue, the turn,
    why it ended, and the tool call awaiting approval if any."""
    found = {"session_id": session.id, "turn_id": outcome["turn_id"], "finish_reason": outcome["finish_reason"]}
    approval = outcome["approval"]
    if approval is not None:
        found |= {"approval_id": approval["approval_id"], "approval_tool": approval["tool"]}
    return found


def usage(outcome: dict[str, Any]) -> tuple[int, int, int] | None:
    """(input, output, cached input) tokens of the turn, when the model reported them."""
    reported = outcome.get("usage")
    if reported is None:
        return None
    return reported["input_tokens"], reported["output_tokens"], reported["cache_read_tokens"]


@attrs.define
class Written:
    """What a stream has shown of the answer, so each event adds only what is new: a model that restarts (a retry, a
    fallback) goes on in a new paragraph, and a final text that differs from what was streamed is shown whole."""

    shown: bool = False
    attempt: str = ""
    restarted: bool = False

    def delta(self, text: str) -> str:
        if not text:
            return ""
        piece = ("\n\n" if self.restarted and self.shown else "") + text
        self.restarted, self.shown = False, True
        self.attempt += text
        return piece

    def reset(self) -> None:
        self.attempt, self.restarted = "", True

    def upto(self, whole: str) -> str:
        """The part of `whole` (the answer so far, whole) not yet shown."""
        if not whole.startswith(self.attempt):
            self.reset()
        return self.delta(whole[len(self.attempt):])

    def event(self, name: str, data: dict[str, Any]) -> str:
        """The text a turn's event ("delta", "reset", "text" or "outcome") adds to the answer."""
        if name == "delta":
            return self.delta(data["text"])
        if name == "reset":
            self.reset()
            return ""
        return self.upto(data["text"] if name == "text" else reply_text(data))
