"""The in-memory Metrics adapter."""

from __future__ import annotations

import threading

from agentloop.adapters import InMemoryMetrics
from agentloop.ports import Metrics


def test_it_implements_the_port() -> None:
    assert isinstance(InMemoryMetrics(), Metrics)


def test_counters_sum_per_label_set() -> None:
    metrics = InMemoryMetrics()
    metrics.increment("jobs", labels={"status": "ok"})
    metrics.increment("jobs", 2, labels={"status": "ok"})
    metrics.increment("jobs", labels={"status": "error"})
    assert metrics.counter("jobs", {"status": "ok"}) == 3
    assert metrics.counter("jobs", {"status": "error"}) == 1
    assert metrics.counter("jobs") == 0


def test_label_order_does_not_matter() -> None:
    metrics = InMemoryMetrics()
    metrics.observe("latency", 1.0, {"a": "1", "b": "2"})
    metrics.observe("latency", 2.0, {"b": "2", "a": "1"})
    assert metrics.observations("latency", {"a": "1", "b": "2"}) == [1.0, 2.0]
    assert metrics.names() == {"latency"}


def test_concurrent_increments_are_not_lost() -> None:
    metrics = InMemoryMetrics()

    def work() -> None:
        for _ in range(1000):
            metrics.increment("n")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.counter("n") == 4000
