"""What happens to a message that arrives while a turn of its session is still running."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import attrs


class MidTurnPolicy(enum.Enum):
    """A bot's answer to a message that arrives while a turn of its session runs.

    QUEUE runs it after the running turn; REJECT refuses it (`TurnInProgressError`, HTTP 409);
    INTERRUPT stops the running turn at its next safe point (before its next model call or
    tool step) and runs the new message with the interrupted one in history.
    """

    QUEUE = "queue"
    REJECT = "reject"
    INTERRUPT = "interrupt"


@attrs.frozen
class Interruption:
    """How a running turn learns, at each safe point, whether a newer message of its session
    waits: `newer()` answers. `AgentLoop` looks at its own queue of the session; a worker
    passes `run_turn(interruption=...)` a look at its inbox."""

    newer: Callable[[], Awaitable[bool]]


def waiting_behind(waiting: Callable[[], bool]) -> Interruption:
    """The interruption of a turn run in this process: a newer message is one waiting behind it (`waiting()`)."""

    async def newer() -> bool:
        return waiting()

    return Interruption(newer)
