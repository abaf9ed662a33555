"""Which exceptions a tool or a system may raise as its own failure, and which must pass through.

Any `BaseException` a tool or a system raises is its failure (`SystemExit` from argparse on a
model's arguments, a stray `GeneratorExit`, a custom `BaseException` subclass), except the user's
interrupt, a task's cancellation and the interpreter closing the coroutine that runs it.
"""

from __future__ import annotations

import asyncio
from typing import Any

_STOPS = (KeyboardInterrupt, asyncio.CancelledError)


def running_task() -> asyncio.Task[Any] | None:
    """The asyncio task running now, if any: what `passes_through` compares against."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        return None


def passes_through(error: BaseException, task: asyncio.Task[Any] | None) -> bool:
    """Whether `error`, caught around a tool or system that `task` was running, must be raised on
    rather than recorded as that tool's or system's failure.

    A `GeneratorExit` is the interpreter's own when it closes the coroutine (its task is then no
    longer the one running, or there was none to tell by); raised while `task` still runs, it is misuse.
    """
    if isinstance(error, _STOPS):
        return True
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(_STOPS) is not None
    if isinstance(error, GeneratorExit):
        return task is None or running_task() is not task
    return False
