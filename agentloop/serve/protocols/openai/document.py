"""The OpenAI API's part of the server's OpenAPI document."""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/OpenAIError"}
_MEANINGS = {
    "401": "no valid bearer token (code unauthorized)",
    "404": "the model is not this server's bot (model_not_found), or the session, response, conversation or approval "
    "named is not this token's (not_found)",
    "409": "a turn of the session is running and the server refuses another (turn_in_progress)",
    "413": "the body is larger than the server's limit (too_large)",
    "422": "bad JSON, a missing or mistyped field, a tool message, a conversation not ending with the user, or a "
    "message too long (invalid)",
    "429": "this token's rate limit; Retry-After says how many seconds to wait (rate_limited)",
    "503": "the bot's database cannot be reached, or the server is starting; Retry-After says when to retry (unavailable)",
}
_SESSION = {
    "name": "X-Agentloop-Session", "in": "header", "required": False, "schema": {"type": "string"},
    "description": "the caller's session to continue (the response names its session in the same header)",
}


def _errors(*statuses: str) -> dict[str, Any]:
    return {
        status: {"description": _MEANINGS[status], "content": {"application/json": {"schema": _ERROR}}}
        for status in ("401", "429", *statuses, "503")
    }


def _turn(summary: str, body: str, answer: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": [_SESSION],
            "requestBody": {"description": body, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {
                "200": {"description": answer, "content": {"application/json": {"schema": {"type": "object"}},
                                                           "text/event-stream": {"schema": {"type": "string"}}}},
                **_errors("404", "409", "413", "422"),
            },
        }
    }


OPENAPI: dict[str, Any] = {
    "paths": {
        "/openai/v1/models": {
            "get": {
                "summary": "OpenAI API: the bot this server hosts, as the one model",
                "security": [{"bearer": []}],
                "responses": {"200": {"description": "{object: list, data: [{id: the bot's name, object: model}]}",
                                      "content": {"application/json": {"schema": {"type": "object"}}}}, **_errors()},
            }
        },
        "/openai/v1/chat/completions": _turn(
            "OpenAI API: a turn as a chat completion",
            "a chat completion request; model is the bot's name; metadata.session_id (or the header) continues a session, "
            "otherwise the messages seed a new one",
            "a chat.completion (metadata: session_id, turn_id, finish_reason, approval_id), or with stream true its "
            "chat.completion.chunk events ending with [DONE]",
        ),
        "/openai/v1/responses": _turn(
            "OpenAI API: a turn as a response",
            "a responses request; previous_response_id, conversation, metadata.session_id or the header continue a session",
            "a response, or with stream true its events (response.created ... response.completed)",
        ),
    },
    "components": {
        "schemas": {
            "OpenAIError": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["message", "type", "code"],
                        "properties": {
                            "message": {"type": "string", "description": "a sentence a client can show"},
                            "type": {"type": "string", "enum": ["invalid_request_error", "authentication_error", "rate_limit_error", "server_error"]},
                            "param": {"type": ["string", "null"]},
                            "code": {"type": "string"},
                        },
                    }
                },
            }
        }
    },
}
"""The OpenAI API's paths and its error schema."""
