"""`agentloop demo`: run as a user runs it, and shown to notice a step that misbehaves."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from agentloop import Tool
from agentloop.bots import Bot, open_bot
from agentloop.demo import run_demo
from agentloop.errors import DemoCheckError
from agentloop.ports import LLM, Channel, Clock


def agentloop_demo(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("agentloop")
    assert script is not None, "pip install -e . puts `agentloop` on PATH"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run([script, "demo", *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_the_demo_runs_offline_and_every_step_holds(tmp_path: Path) -> None:
    result = agentloop_demo(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "agentloop demo: a travel helper on a scripted model — no network, no API key"
    for expected in [
        "  tool weather(city='Lisbon') -> Lisbon: sunny, 24°C",
        "bot> Sunny and about 24°C in Lisbon this weekend.",
        "bot> I'm getting too many requests right now. Please try again in a minute.",
        "  finish: error  (fallback answer)",
        "  failure: llm ToolLoopSystem rate_limit: the model server is rate limiting requests (HTTP 429)",
        "bot> 200 euros is about 216 US dollars.",
        "  distillation: stored (stored as a draft pattern)",
        "  note offered: #1 'Planning a weekend city trip: weather, money and packing' (similarity 0.45)",
        "    | ### Planning a weekend city trip: weather, money and packing",
        "  positive feedback credited note #1 (useful 1x in 1 retrieval(s))",
    ]:
        assert expected in lines
    assert lines[-1].startswith("demo ok: ") and lines[-1].endswith("checks held over 9 steps")
    progress = result.stderr.splitlines()
    assert [line.split("]")[0] for line in progress] == [f"[{n}/9" for n in range(1, 10)]
    assert list(tmp_path.iterdir()) == [], "the demo's temporary data directory is removed"


def test_the_demo_keeps_its_data_where_asked_and_refuses_a_used_directory(tmp_path: Path) -> None:
    assert agentloop_demo("--data-dir", "kept", cwd=tmp_path).returncode == 0
    assert {p.name for p in (tmp_path / "kept").iterdir()} >= {"bot.sqlite3", "bot.notes.sqlite3"}
    recorded = set()
    for name in ("bot.sqlite3", "bot.notes.sqlite3"):
        with closing(sqlite3.connect(tmp_path / "kept" / name)) as conn:
            recorded |= set(conn.execute("SELECT name, dim FROM vector_embedders").fetchall())
    assert recorded == {("wordllama-v1/256", 256)}, "the demo's stores are built by the default embedder"
    again = agentloop_demo("--data-dir", "kept", cwd=tmp_path)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.splitlines() == [
        "agentloop: kept is not empty; the demo's story starts from a new bot, so give a new or empty --data-dir"
    ]


def test_the_demo_names_the_step_that_misbehaves(tmp_path: Path) -> None:
    """A bot without the weather tool: the first turn's tool call fails, and the demo says so."""

    @contextmanager
    def without_weather(data_dir: str | Path, llm: LLM, channel: Channel, *, tools: Iterable[Tool], clock: Clock) -> Iterator[Bot]:
        with open_bot(data_dir, llm, channel, tools=[t for t in tools if t.name != "weather"], clock=clock) as bot:
            yield bot

    with pytest.raises(DemoCheckError) as failed:
        asyncio.run(run_demo(without_weather, tmp_path, out=io.StringIO(), progress=io.StringIO()))
    assert str(failed.value) == (
        "step 1 (lisbon-weekend: What's the weather in Lisbon this weekend?) misbehaved: "
        "expected failures [], got ['tool/validation']"
    )
