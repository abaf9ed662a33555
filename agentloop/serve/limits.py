"""Per-token rate limiting: a token bucket for each caller, refilled continuously."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import attrs


@attrs.define
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Allows each key `burst` requests at once and `per_minute` a minute on average.

    `check` answers 0 when a request may go ahead (and counts it), else how many whole
    seconds until one will be allowed: what `Retry-After` tells the client.
    """

    def __init__(self, per_minute: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs per_minute > 0 and burst >= 1, got {per_minute} and {burst}")
        self.rate = per_minute / 60.0
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def check(self, key: str) -> int:
        now = self._clock()
        bucket = self._buckets.setdefault(key, _Bucket(float(self.burst), now))
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))
