"""The errors of serving a bot over HTTP: a bad token file, and the JSON errors clients see."""

from __future__ import annotations
from agentloop.errors import AgentloopError


class TokenFileError(ValueError, AgentloopError):
    """The token file cannot be read or says something impossible; the message names the fix."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"token file {path}: {problem}")
        self.path = path
        self.problem = problem


class ApiError(AgentloopError):
    """A request the server refuses: sent to the client as `{"error": {"code", "message"}}` with `status`."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
