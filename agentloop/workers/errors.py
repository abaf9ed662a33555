"""Errors of the durable inbox and its workers, each with the fix in its message."""

from __future__ import annotations
from agentloop.errors import AgentloopError


class InboxUrlError(ValueError, AgentloopError):
    """The inbox lives in PostgreSQL; the URL given names something else or cannot be reached."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(
            f"cannot open the inbox at {url}: {problem}; give a postgresql://user@host/db URL "
            f"(pip install 'agentloop-ecs[postgres]')"
        )
        self.url = url


class MessageIdConflictError(ValueError, AgentloopError):
    """A message id was submitted again with another session or message."""

    def __init__(self, bot: str, message_id: str) -> None:
        super().__init__(
            f"message {message_id!r} of bot {bot!r} was already submitted with another session or text; "
            f"a resubmit must repeat the same message, so give a new message a new id"
        )
        self.message_id = message_id


class UnknownMessageError(LookupError, AgentloopError):
    """No message with this id was ever submitted to the bot's inbox."""

    def __init__(self, bot: str, message_id: str) -> None:
        super().__init__(f"bot {bot!r} has no message {message_id!r} in its inbox; submit it first")
        self.message_id = message_id


class MessageNotAnsweredError(TimeoutError, AgentloopError):
    """A message's turn did not finish within the time its submitter waited."""

    def __init__(self, message_id: str, timeout: float, attempts: int, error: str | None) -> None:
        why = f"; its last run failed: {error}" if error else ""
        super().__init__(
            f"message {message_id!r} was not answered within {timeout:g}s ({attempts} run(s) so far{why}); "
            f"it stays in the inbox, so wait again, and check that a worker is running (agentloop worker)"
        )
        self.message_id = message_id


class TurnNotStoredError(RuntimeError, AgentloopError):
    """A message's turn ran but what it was to store (its history, its memory) did not land,
    or a store it read could not be reached and it had only an apology to send (held back),
    so the turn is not finished: its job is run again after a backoff."""

    def __init__(self, message_id: str, reasons: str) -> None:
        super().__init__(
            f"the turn of message {message_id!r} was not stored ({reasons}); it is run again after a backoff, "
            f"writing its history once and sending no second reply; if it keeps failing, check the stores' database"
        )
        self.message_id = message_id
