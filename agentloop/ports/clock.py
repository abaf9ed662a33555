"""The Clock port: wall time for records, monotonic time for deadlines."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; used for deadlines and durations."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to: `advance(seconds)`."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC), monotonic: float = 1000.0) -> None:
        self._now = start
        self._monotonic = monotonic

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
