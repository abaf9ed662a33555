"""Per-token rate limiting: a token bucket for each caller, refilled continuously."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

import attrs


@attrs.define
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Allows each key `burst` requests at once and `per_minute` a minute on average.

    `check` answers 0 when a request may go ahead (and counts it), else how many whole
    seconds until one will be allowed: what `Retry-After` tells the client. A bucket is
    forgotten once it has had time to fill again (a fresh one is the same), so memory holds
    only the keys seen within the last `burst / rate` seconds.
    """

    def __init__(self, per_minute: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs per_minute > 0 and burst >= 1, got {per_minute} and {burst}")
        self.rate = per_minute / 60.0
        self.burst = burst
        self._clock = clock
        self._refill = burst / self.rate
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        """How many keys have a bucket that is not full."""
        return len(self._buckets)

    def check(self, key: str) -> int:
        now = self._clock()
        self._forget_full(now)
        bucket = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
        self._buckets[key] = bucket  # the most recently used last: the oldest fill first
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))

    def _forget_full(self, now: float) -> None:
        """Drop the buckets untouched long enough to be full again, oldest first."""
        while self._buckets:
            oldest = next(iter(self._buckets.values()))
            if now - oldest.updated < self._refill:
                return
            self._buckets.popitem(last=False)
