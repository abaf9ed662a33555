"""The embedded Metrics adapter: an in-memory recorder that tests can read."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping

Labels = tuple[tuple[str, str], ...]


def _key(labels: Mapping[str, str] | None) -> Labels:
    return tuple(sorted((labels or {}).items()))


class InMemoryMetrics:
    """Counters summed and histogram observations kept, per name and label set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: defaultdict[tuple[str, Labels], float] = defaultdict(float)
        self._histograms: defaultdict[tuple[str, Labels], list[float]] = defaultdict(list)

    def increment(self, name: str, value: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._counters[(name, _key(labels))] += value

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._histograms[(name, _key(labels))].append(value)

    def counter(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """The counter's total for exactly these labels (0 if never incremented)."""
        with self._lock:
            return self._counters.get((name, _key(labels)), 0.0)

    def observations(self, name: str, labels: Mapping[str, str] | None = None) -> list[float]:
        """Every value observed for the histogram with exactly these labels."""
        with self._lock:
            return list(self._histograms.get((name, _key(labels)), ()))

    def names(self) -> set[str]:
        """Every metric name recorded so far."""
        with self._lock:
            return {name for name, _ in self._counters} | {name for name, _ in self._histograms}
