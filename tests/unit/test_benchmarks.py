"""The benchmark scripts run: each one's `main`, with tiny numbers, prints its table.

Only the shape of the output is checked; what the figures are depends on the machine.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import structlog

from tests.pg import postgres_url  # noqa: F401  (a fixture)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MS = r"\d+\.\d\d ms"


def load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"benchmark_{script}", BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(script: str, *argv: str) -> None:
    """Run the script's `main`, then put back the logging configuration it sets."""
    logging_config = structlog.get_config()
    try:
        load(script).main(list(argv))
    finally:
        structlog.configure(**logging_config)


def test_event_loop_lag_prints_a_row_of_figures_per_session_count(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("event_loop_lag", "--sessions", "1,2", "--turns", "2", "--model-delay", "0.001")
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:1] == ["sessions"] and "lag p99" in line for line in lines)
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("idle", "1", "2")}
    assert set(rows) == {"idle", "1", "2"}
    assert re.match(rf"\s*idle\s+0\s+-\s+\d+\s+{MS}\s+{MS}\s+{MS}", rows["idle"])
    for sessions, turns in (("1", 2), ("2", 4)):
        assert re.match(rf"\s*{sessions}\s+{turns}\s+\d+\.\d\s+\d+\s+{MS}\s+{MS}\s+{MS}\s+\w+\.\w+ {MS}", rows[sessions])
    assert any(line.startswith("tool executions captured") for line in lines)


def test_workers_prints_turns_per_second_per_worker_count(capsys: pytest.CaptureFixture[str], postgres_url: str) -> None:
    run_main("workers", "--url", postgres_url, "--workers", "1,2", "--sessions", "3", "--messages", "2", "--concurrency", "2",
             "--model-delay", "0.001")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("6 turns (3 sessions x 2)")
    assert re.match(r"1 worker process\(es\), PostgreSQL inbox\s+\d+\.\d\s+1\.00x$", lines[2])
    assert re.match(r"2 worker process\(es\), PostgreSQL inbox\s+\d+\.\d\s+\d+\.\d\dx\s+>= 1\.6x\s+(ok|MISSED)$", lines[3])
    assert re.match(r"1 process, SQLite, no inbox\s+\d+\.\d$", lines[4])
