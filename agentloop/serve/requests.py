"""What every served request goes through: the bearer token (→ `Caller`), the rate limit, the body's limits,
and the mapping of errors to the JSON a client reads, in a shape each protocol chooses (`ErrorRenderer`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentloop._log import get_logger
from agentloop._text import storable
from agentloop.errors import StoreUnavailableError, TurnInProgressError
from agentloop.serve.auth import Caller, token_digest
from agentloop.serve.errors import ApiError
from agentloop.serve.server import Server

_log = get_logger("agentloop.serve")

Handler = Callable[[Server, Request, Caller], Awaitable[Response]]
"""An endpoint behind the token: the server, the request and the caller its token stands for."""
ErrorRenderer = Callable[[ApiError], Response]
"""How a protocol shows a refusal: the response for an `ApiError` (its status, code, message and headers)."""


def native_error(error: ApiError) -> Response:
    """The native API's error: `{"error": {"code", "message"}}` with the error's status and headers."""
    return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status, headers=error.headers)


def api(server: Server, handler: Handler, *, render: ErrorRenderer = native_error) -> Callable[[Request], Awaitable[Response]]:
    """`handler` behind the bearer token and the caller's rate limit; every error becomes the response `render` makes."""

    async def endpoint(request: Request) -> Response:
        async def authorised() -> Response:
            caller, identity = _caller(server, request)
            wait = server.limiter.check(identity)
            if wait:
                raise ApiError(
                    429, "rate_limited", f"too many requests with this token; try again in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            return await handler(server, request, caller)

        return await answer(authorised, render)

    return endpoint


def public(
    server: Server, handler: Callable[[Server, Request], Awaitable[Response]], *, render: ErrorRenderer = native_error
) -> Callable[[Request], Awaitable[Response]]:
    """`handler` open to anyone (no token, no rate limit); every error becomes the response `render` makes."""

    async def endpoint(request: Request) -> Response:
        return await answer(lambda: handler(server, request), render)

    return endpoint


async def answer(respond: Callable[[], Awaitable[Response]], render: ErrorRenderer = native_error) -> Response:
    """The response, or the error a client can show; an unexpected exception is logged, never shown."""
    try:
        return await respond()
    except Exception as error:
        return render(api_error(error))


def api_error(error: Exception) -> ApiError:
    """`error` as the refusal a client is shown: itself, 503 for a database out of reach, 409 for a session
    mid-turn under the reject policy, 500 (logged, not shown) for anything else."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, StoreUnavailableError):
        return unavailable(error)
    if isinstance(error, TurnInProgressError):
        return ApiError(409, "turn_in_progress", str(error))
    _log.error("serve.internal_error", exc_info=error)
    return ApiError(500, "internal", "the server failed on this request; try again, and tell its operator if it keeps failing")


def unavailable(error: StoreUnavailableError) -> ApiError:
    """A database out of reach, as the 503 a client retries after `Retry-After` seconds."""
    _log.warning("serve.store_unavailable", error=str(error))
    return ApiError(
        503, "unavailable", f"the bot's database cannot be reached just now; send the same request again in {error.retry_after} s",
        headers={"Retry-After": str(error.retry_after)},
    )


def _caller(server: Server, request: Request) -> tuple[Caller, str]:
    """The caller of the request's bearer token and the token's digest (what its rate limit is kept by).

    The scheme is matched in any case and the credentials may be surrounded by any whitespace (RFC 7235),
    so no respelling of the header names another limit."""
    parts = request.headers.get("authorization", "").split()
    token = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else None
    caller = None if token is None else server.tokens.caller(token)
    if token is None or caller is None:
        raise ApiError(
            401, "unauthorized", "a valid token is needed: send the header Authorization: Bearer <token> with a token the server knows"
        )
    return caller, token_digest(token)


async def read_body(server: Server, request: Request) -> dict[str, Any]:
    """The request's JSON object, read up to the size limit (413 past it, 422 when it is not a JSON object)."""
    limit = server.settings.max_body_bytes
    too_large = ApiError(413, "too_large", f"the request body is larger than {limit} bytes; send less")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    if not body:
        return {}
    try:
        data = json.loads(body, parse_int=_number(int), parse_float=_number(float), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, _Refused) as error:
        raise ApiError(422, "invalid", f"the request body is not valid JSON ({error})") from error
    except RecursionError as error:
        raise ApiError(422, "invalid", f"the request body nests deeper than {MAX_JSON_DEPTH} levels; send a flatter object") from error
    if not isinstance(data, dict):
        raise ApiError(422, "invalid", "the request body must be a JSON object")
    cleaned: dict[str, Any] = _clean(data)
    return cleaned


MAX_JSON_DEPTH = 32
"""How deeply arrays and objects may nest in a request body."""
MAX_NUMBER_CHARS = 64
"""How long a number in a request body may be written."""


class _Refused(ValueError):
    """A JSON value the server does not take (a number too long, NaN or Infinity)."""


def _number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _Refused(f"a number is written with {len(text)} characters; the limit is {MAX_NUMBER_CHARS}")
        return kind(text)

    return parse


def _no_constant(text: str) -> Any:
    raise _Refused(f"{text} is not a JSON number")


def _clean(value: Any, depth: int = 1) -> Any:
    """`value` with every string made storable (NUL and lone surrogates replaced by U+FFFD, as all input is);
    422 past `MAX_JSON_DEPTH` levels of arrays and objects."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, (dict, list)) and depth > MAX_JSON_DEPTH:
        raise ApiError(422, "invalid", f"the request body nests deeper than {MAX_JSON_DEPTH} levels; send a flatter object")
    if isinstance(value, dict):
        return {storable(key): _clean(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item, depth + 1) for item in value]
    return value


def field(body: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    """`body[name]` if it is a `kind` (str, bool, int, float, list or dict); 422 naming the field otherwise, or when it is
    missing and `required` (an absent optional field is None)."""
    value = body.get(name)
    if value is None and not required:
        return None
    accepted = (int, float) if kind is float else kind  # a JSON number written without a point is a number too
    if not isinstance(value, accepted) or (kind in (int, float) and isinstance(value, bool)):
        raise ApiError(422, "invalid", f"the field {name!r} must be a {_TYPE_NAMES[kind]}")
    return value


_TYPE_NAMES = {
    str: "string", bool: "boolean (true or false)", int: "whole number", float: "number", list: "list", dict: "JSON object",
}


def message_text(server: Server, text: str) -> str:
    """`text` as a message the bot takes: 422 when it is blank or longer than the server's limit."""
    limit = server.settings.max_message_chars
    if not text.strip():
        raise ApiError(422, "invalid", "the message is empty; send some text")
    if len(text) > limit:
        raise ApiError(422, "invalid", f"the message is {len(text)} characters long; the limit is {limit}")
    return text
