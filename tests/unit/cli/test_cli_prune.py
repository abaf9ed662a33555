"""`agentloop stores prune`: a retention file and flags applied to a bot's stores, in one line."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.cli import main
from agentloop.messages import ChatMessage
from agentloop.scopes import Scope

HISTORY = Scope("acme", user_id="ada", session_id="s1")


def _history(directory: Path, turns: int) -> None:
    with open_stores(directory, embedder=HashingEmbedder(dim=64)) as stores:
        for n in range(turns):
            asyncio.run(stores.sessions.append(HISTORY, [ChatMessage.user(f"q{n}"), ChatMessage.assistant(f"a{n}")]))


def _turns_left(directory: Path) -> list[str | None]:
    with open_stores(directory, embedder=HashingEmbedder(dim=64)) as stores:
        return [m.content for m in asyncio.run(stores.sessions.recent(HISTORY, 100)) if m.role.value == "user"]


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_prune_applies_the_file_with_each_flag_overriding_its_setting(tmp_path: Path) -> None:
    _history(tmp_path, 5)
    settings = tmp_path / "retention.toml"
    settings.write_text("[retention]\nhistory_turns = 1\nusage_days = 30\n")
    status, printed = run_cli("stores", "prune", str(tmp_path), "--retention", str(settings), "--history-turns", "3")
    assert status == 0 and "pruned history 4" in printed and "bytes" in printed
    assert _turns_left(tmp_path) == ["q2", "q3", "q4"]


def test_prune_with_no_setting_says_it_only_compacts(tmp_path: Path) -> None:
    _history(tmp_path, 2)
    status, printed = run_cli("stores", "prune", str(tmp_path))
    assert status == 0 and "only compacted" in printed and "pruned nothing" in printed
    assert _turns_left(tmp_path) == ["q0", "q1"]


def test_prune_refuses_a_window_below_one_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _history(tmp_path, 2)
    status, _ = run_cli("stores", "prune", str(tmp_path), "--summaries-days", "0")
    error = capsys.readouterr().err
    assert status == 1 and "summaries_days must be a whole number of at least 1" in error and error.count("\n") == 1
    assert _turns_left(tmp_path) == ["q0", "q1"]


def test_a_worker_with_an_unreadable_retention_file_stops_before_it_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, printed = run_cli(
        "worker", "--stores", "postgresql://me@/db?host=/nowhere", "--pipeline", "my_bot:factory",
        "--retention", str(tmp_path / "missing.toml"),
    )
    error = capsys.readouterr().err
    assert status == 1 and printed == "" and error == f"agentloop: cannot read the retention file {tmp_path / 'missing.toml'}: No such file or directory\n"
