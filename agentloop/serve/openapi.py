"""The OpenAPI document of the server, served at /openapi.json (a test keeps it and the routes in step)."""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: str) -> dict[str, Any]:
    meanings = {
        "401": "no valid bearer token (code unauthorized)",
        "403": "the token is not an administrator, or not of the chain asked (code forbidden)",
        "404": "no such session (or approval) for this token (code not_found)",
        "413": "the body is larger than the server's limit (code too_large)",
        "422": "bad JSON, a missing or mistyped field, or a message too long (code invalid)",
        "429": "this token's rate limit; the Retry-After header says how many seconds to wait (code rate_limited)",
        "503": "the bot's database cannot be reached (or the server is starting); the Retry-After header says how many "
        "seconds to wait before sending the same request again (code unavailable; code erasing while an admin erases "
        "this user's data)",
    }
    return {status: _json(_ref("Error"), meanings[status]) for status in ("401", "429", *statuses, "503")}


_SESSION = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
_TURN = {
    "200": {
        "description": "the turn's Outcome as JSON, or with Accept: text/event-stream a stream of `delta` events "
        "(data {text}), `reset` events (data {reason}: discard what was streamed), `text` events (data {text}: a "
        "whole message delivered) and one final `outcome` event",
        "content": {"application/json": {"schema": _ref("Outcome")}, "text/event-stream": {"schema": {"type": "string"}}},
    },
}
_BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
_LAYERS: dict[str, dict[str, Any]] = {
    layer: {"name": layer, "in": "query", "required": False, "schema": {"type": "string"}, "description": f"the {layer} (default: the admin's own)"}
    for layer in ("org", "team", "project")
}
_ADMIN_USER = [{"name": "user", "in": "path", "required": True, "schema": {"type": "string"}}, *_LAYERS.values()]
_ADMIN_SESSION = [_SESSION, _LAYERS["org"]]
_ERASED = _json(
    {"type": "object", "properties": {"erased": {"type": "object", "additionalProperties": {"type": "integer"}}, "total": {"type": "integer"}}},
    "the rows removed per store, and in all",
)
_EXPORTED = _json({"type": "array", "items": {"type": "object"}}, "the records, each with store and kind (docs/privacy.md)")

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "agentloop serve", "version": "1"},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {"code": {"type": "string"}, "message": {"type": "string", "description": "a sentence a client can show"}},
                    }
                },
            },
            "Outcome": {
                "type": "object",
                "required": ["turn_id", "message_id", "finish_reason", "text", "fallback", "failures", "approval"],
                "properties": {
                    "turn_id": {"type": "string"},
                    "message_id": {"type": "string"},
                    "finish_reason": {
                        "type": "string",
                        "enum": ["success", "error", "iteration_limit", "deadline", "policy_denied", "plan_mode", "awaiting_approval", "interrupted"],
                    },
                    "text": {"type": ["string", "null"], "description": "exactly what the user receives"},
                    "fallback": {"type": "boolean"},
                    "failures": {"type": "array", "items": {"type": "string"}, "description": "user-safe descriptions"},
                    "approval": {
                        "type": ["object", "null"],
                        "properties": {"approval_id": {"type": "string"}, "tool": {"type": "string"}, "arguments": {"type": "object"}},
                    },
                    "tools": {
                        "type": "array",
                        "description": "the tools the turn ran, in order (empty for a turn a worker ran); a failed one has no result",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"}, "arguments": {"type": "object"},
                                "result": {"type": ["string", "null"], "description": "cut to its first 2000 characters"},
                                "failed": {"type": "boolean"},
                            },
                        },
                    },
                    "usage": {
                        "type": "object",
                        "description": "the model's tokens over the turn; present only when the model reported them",
                        "properties": {k: {"type": "integer"} for k in ("input_tokens", "output_tokens", "cache_read_tokens")},
                    },
                },
            },
        },
    },
    "paths": {
        "/healthz": {"get": {"summary": "the server is up", "responses": {"200": _json({"type": "object"}, "{status: ok}")}}},
        "/readyz": {
            "get": {
                "summary": "the bot's stores (and, with workers, its inbox) can be reached: the server can answer messages",
                "responses": {
                    "200": _json({"type": "object"}, "{status: ready}"),
                    "503": _json({"type": "object"}, "{status: unavailable, unreachable: [stores | inbox]}, with Retry-After"),
                },
            }
        },
        "/openapi.json": {"get": {"summary": "this document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")}}},
        "/": {"get": {"summary": "the chat page", "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
        "/static/{path}": {
            "get": {
                "summary": "the chat page's files",
                "parameters": [{"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "a file"}},
            }
        },
        "/v1/me": {
            "get": {
                "summary": "who the token stands for",
                "security": _BEARER,
                "responses": {"200": _json({"type": "object"}, "{user, tenant: {org, team, project}, role: user or admin}"), **_errors()},
            }
        },
        "/v1/sessions": {
            "post": {
                "summary": "start a session, owned by the token's user and tenant chain",
                "security": _BEARER,
                "responses": {"201": _json({"type": "object"}, "{session_id}"), **_errors("413", "422")},
            }
        },
        "/v1/sessions/{session_id}/messages": {
            "post": {
                "summary": "send a message; the reply as JSON or streamed as Server-Sent Events",
                "security": _BEARER,
                "parameters": [_SESSION],
                "requestBody": _json(
                    {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}, "message_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"}}},
                    "the message",
                ),
                "responses": {**_TURN, **_errors("404", "413", "422")},
            },
            "get": {
                "summary": "the session's history",
                "security": _BEARER,
                "parameters": [_SESSION],
                "responses": {"200": _json({"type": "object"}, "{messages: [{role: user|assistant, text}]}"), **_errors("404")},
            },
        },
        "/v1/sessions/{session_id}/feedback": {
            "post": {
                "summary": "thumbs up or down on a turn; credits the notes it was shown",
                "security": _BEARER,
                "parameters": [_SESSION],
                "requestBody": _json(
                    {"type": "object", "required": ["turn_id", "positive"], "properties": {"turn_id": {"type": "string"}, "positive": {"type": "boolean"}}},
                    "the verdict",
                ),
                "responses": {"200": _json({"type": "object"}, "{credited: number of notes}"), **_errors("404", "413", "422")},
            }
        },
        "/v1/sessions/{session_id}/approvals/{approval_id}": {
            "post": {
                "summary": "approve or deny the tool call awaiting approval; the turn that follows, like a message's",
                "security": _BEARER,
                "parameters": [_SESSION, {"name": "approval_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "requestBody": _json(
                    {"type": "object", "required": ["approve"], "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}}},
                    "the decision, with an optional note for the model",
                ),
                "responses": {**_TURN, **_errors("404", "413", "422")},
            }
        },
        "/v1/sessions/{session_id}/end": {
            "post": {
                "summary": "end the session and distil it into a note",
                "security": _BEARER,
                "parameters": [_SESSION],
                "requestBody": _json(
                    {"type": "object", "properties": {"success": {"type": "boolean", "default": True}}}, "optional: whether the session succeeded"
                ),
                "responses": {"200": _json({"type": "object"}, "{status, reason} of distillation"), **_errors("404", "413", "422")},
            }
        },
        "/v1/admin/users/{user}": {
            "delete": {
                "summary": "erase everything kept about the user in the chain given (an admin's token; audited)",
                "security": _BEARER,
                "parameters": _ADMIN_USER,
                "responses": {"200": _ERASED, **_errors("403")},
            }
        },
        "/v1/admin/users/{user}/export": {
            "get": {
                "summary": "everything kept about the user in the chain given, as a streamed JSON array of records (an admin's token; audited)",
                "security": _BEARER,
                "parameters": _ADMIN_USER,
                "responses": {"200": _EXPORTED, **_errors("403")},
            }
        },
        "/v1/admin/sessions/{session_id}": {
            "delete": {
                "summary": "erase everything kept about the session in the org given (an admin of the whole org; audited)",
                "security": _BEARER,
                "parameters": _ADMIN_SESSION,
                "responses": {"200": _ERASED, **_errors("403")},
            }
        },
        "/v1/admin/sessions/{session_id}/export": {
            "get": {
                "summary": "everything kept about the session in the org given, as a streamed JSON array (an admin of the whole org; audited)",
                "security": _BEARER,
                "parameters": _ADMIN_SESSION,
                "responses": {"200": _EXPORTED, **_errors("403")},
            }
        },
    },
}
"""The document: every route of `create_app`, with its body, its answers and its errors."""
