"""Stopping a long-running command (a worker, a chat runner) on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set `stop` on the first SIGTERM or SIGINT; a second one acts as it would without this."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)

    def stopping() -> None:
        for number in signals:
            loop.remove_signal_handler(number)
        stop.set()

    for number in signals:
        loop.add_signal_handler(number, stopping)
    try:
        yield
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
