"""`agentloop serve`: a bot over HTTP (JSON and Server-Sent Events), with bearer tokens mapped to tenants.

Needs the `serve` extra (starlette, uvicorn).
"""

from agentloop.serve.app import create_app
from agentloop.serve.auth import Caller, Tokens, load_tokens
from agentloop.serve.errors import ApiError, TokenFileError
from agentloop.serve.settings import ServeSettings

__all__ = ["ApiError", "Caller", "ServeSettings", "TokenFileError", "Tokens", "create_app", "load_tokens"]
