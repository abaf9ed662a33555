"""configure_logging: level filtering and renderers for applications."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from agentloop.logging import configure_logging
from agentloop.testing import make_system, run_pipeline


@pytest.fixture(autouse=True)
def restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def test_json_at_debug_has_one_event_per_system_and_one_per_turn() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", json=True, stream=stream)
    ctx = run_pipeline([make_system("A", 10), make_system("B", 20)])
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e.get("system")) for e in events] == [("system.run", "A"), ("system.run", "B"), ("turn.finished", None)]
    assert all(e["turn_id"] == ctx.turn_id and e["session_id"] == "test-session" for e in events)
    assert events[0]["level"] == "debug" and "timestamp" in events[0]


def test_info_level_filters_per_system_events() -> None:
    stream = io.StringIO()
    configure_logging("info", stream=stream)
    run_pipeline([make_system("A", 10)])
    assert "turn.finished" in stream.getvalue() and "system.run" not in stream.getvalue()


def test_failures_are_rendered_with_the_traceback() -> None:
    stream = io.StringIO()
    configure_logging("WARNING", json=True, stream=stream)

    def boom(ctx: object) -> None:
        raise RuntimeError("kaput")

    run_pipeline([make_system("Breaker", 10, boom)])
    (event,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert event["event"] == "system.failed" and "RuntimeError: kaput" in event["exception"]


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("LOUD")
