"""configure_logging: level filtering and renderers for applications."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import structlog

from agentloop.adapters import LogNotifier
from agentloop.logging import configure_logging
from agentloop.notes import MaintainerNotice, NoticeKind
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


def test_a_program_that_never_configures_logging_has_only_its_own_output_on_stdout() -> None:
    """Library log lines went to stdout, mixed into the bot's output; they go to stderr now."""
    import subprocess
    import sys

    script = (
        "from agentloop.testing import make_system, run_pipeline\n"
        "def boom(ctx): raise RuntimeError('kaput')\n"
        "ctx = run_pipeline([make_system('A', 10), make_system('Breaker', 20, boom)])\n"
        "print('turn done with', len(ctx.failures), 'failure')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == "turn done with 1 failure\n"
    assert "system.failed" in result.stderr and "kaput" in result.stderr and "turn.finished" not in result.stderr


@pytest.mark.parametrize("configured", [False, True], ids=["standard logging", "configure_logging"])
def test_a_failure_is_logged_with_a_plain_traceback_even_where_rich_is_installed(configured: bool) -> None:
    """With rich installed (transformers brings it), structlog drew each traceback through rich,
    ~14 ms per failed system; a plain traceback is the same facts at a fraction of a millisecond."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    if configured:
        configure_logging("WARNING", stream=stream)
    else:
        structlog.reset_defaults()
        logging.getLogger("agentloop").addHandler(handler)

    def boom(ctx: object) -> None:
        raise RuntimeError("kaput")

    try:
        run_pipeline([make_system("Breaker", 10, boom)])
    finally:
        logging.getLogger("agentloop").removeHandler(handler)
    text = stream.getvalue()
    assert "Traceback (most recent call last)" in text and "RuntimeError: kaput" in text
    assert "╭" not in text and "│" not in text, "a rich box was drawn"


def test_a_library_warning_reaches_the_handler_the_application_installs() -> None:
    """Without structlog configured, library events are records of the standard `agentloop...` loggers."""
    structlog.reset_defaults()
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.WARNING)
    logging.getLogger("agentloop").addHandler(handler)
    try:
        LogNotifier().notify(MaintainerNotice(NoticeKind.NOTE_FLAGGED, (1,), "two notes disagree", datetime.now(UTC)))
    finally:
        logging.getLogger("agentloop").removeHandler(handler)
    (record,) = records
    assert record.name == "agentloop.maintainers" and record.levelno == logging.WARNING
    assert record.getMessage().startswith("maintainer.notice ") and "'two notes disagree'" in record.getMessage()


def test_an_application_without_logging_set_up_sees_library_warnings_on_stderr_only() -> None:
    """Python's last-resort handler prints warnings to stderr when nobody configured logging."""
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from agentloop.adapters import LogNotifier\n"
        "from datetime import UTC, datetime\nfrom agentloop.notes import MaintainerNotice, NoticeKind\n"
        "LogNotifier().notify(MaintainerNotice(NoticeKind.NOTE_FLAGGED, (1,), 'disagree', datetime.now(UTC)))\n"
        "logging.getLogger('agentloop.x').info('not shown')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == ""
    assert result.stderr.startswith("maintainer.notice ") and "not shown" not in result.stderr


def test_a_library_debug_event_is_dropped_unless_the_standard_logger_wants_debug() -> None:
    """Unconfigured, an event below the standard logger's level is never formatted; lowered, it arrives."""
    from agentloop._log import get_logger

    structlog.reset_defaults()
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    class Unprintable:
        def __repr__(self) -> str:
            raise AssertionError("a dropped event was formatted")

    standard = logging.getLogger("agentloop.test_debug")
    standard.addHandler(Keep(logging.DEBUG))
    try:
        get_logger("agentloop.test_debug").debug("quiet", value=Unprintable())
        standard.setLevel(logging.DEBUG)
        get_logger("agentloop.test_debug").debug("heard", value=1)
    finally:
        standard.handlers.clear()
        standard.setLevel(logging.NOTSET)
    assert [record.getMessage() for record in records] == ["heard value=1"]
