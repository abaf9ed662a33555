"""BotStores across processes: a restarted bot sees the same history, memory and RAG results."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentloop.adapters import BotStores, HashingEmbedder
from agentloop.scopes import Scope
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import StandardOptions, standard_pipeline

ROOT = Path(__file__).resolve().parents[2]

# Runs turns through a standard pipeline, then either closes cleanly or dies without
# saving the index ("crash"), or only reads back what the stores hold ("read").
SCRIPT = r"""
import json, os, sys
from agentloop import IncomingMessage, Session
from agentloop.adapters import BotStores, HashingEmbedder
from agentloop.scopes import Scope
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import standard_pipeline
from agentloop.scopes import Scope, history_scope

ADA = Scope(user_id="ada")  # memory and indexed answers of user ada, who has no org

configure_logging("WARNING")
data_dir, mode = sys.argv[1], sys.argv[2]
session = Session("chat-1", user_id="ada")
queries = ["deployment schedule", "invoice day", "lunch time"]

def snapshot(stores):
    return {
        "history": [[m.role.value, m.content] for m in stores.sessions.recent(history_scope(session), 100)],
        "memory": [[e.user_text, e.assistant_text] for e in stores.memory.recent(ADA, 100)],
        "rag": [[[h.id, h.text, round(h.score, 5)] for h in stores.rag.search(ADA, q, 3)] for q in queries],
    }

if mode == "read":
    stores = BotStores.open(data_dir, "helper", embedder=HashingEmbedder(dim=128))
    print(json.dumps(snapshot(stores)))
    stores.close()
    sys.exit(0)
answers = {"When is the deployment?": "The deployment runs every night at two.",
           "When are invoices sent?": "Invoices go out on the first of the month.",
           "When is lunch?": "Lunch is at noon."}
if mode == "crash":
    answers = {"One more thing?": "The deployment window moved to three."}
llm = ScriptedLLM(list(answers.values()))
pipeline = standard_pipeline(llm, RecordingChannel(), data_dir=data_dir, bot="helper",
                             embedder=HashingEmbedder(dim=128))
loop = pipeline.build()
for question in answers:
    loop.run_turn_sync(session, IncomingMessage(question))
print(json.dumps(snapshot(pipeline.stores)))
sys.stdout.flush()
if mode == "crash":
    os._exit(0)
pipeline.close()
"""


def bot_process(data_dir: Path, mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), mode], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_restarted_bot_sees_the_same_history_memory_and_rag(tmp_path: Path) -> None:
    written = bot_process(tmp_path, "write")
    assert written["history"][:2] == [["user", "When is the deployment?"],  # type: ignore[index]
                                      ["assistant", "The deployment runs every night at two."]]
    assert len(written["memory"]) == 3  # type: ignore[arg-type]
    assert bot_process(tmp_path, "read") == written


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_damaged_index_file_is_rebuilt_with_identical_results(tmp_path: Path, damage: str) -> None:
    written = bot_process(tmp_path, "write")
    index = tmp_path / "helper.rag.hnsw"
    if damage == "delete":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    assert bot_process(tmp_path, "read") == written
    assert index.exists()


def test_a_crash_before_the_index_is_saved_loses_nothing(tmp_path: Path) -> None:
    bot_process(tmp_path, "write")
    after_crash = bot_process(tmp_path, "crash")
    reread = bot_process(tmp_path, "read")
    assert reread == after_crash
    assert ["One more thing?", "The deployment window moved to three."] in reread["memory"]  # type: ignore[operator]


def test_bot_names_that_are_not_file_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bot name"):
        BotStores.open(tmp_path, "../escape")


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """Every connection the bot's stores open from now on."""
    from agentloop.adapters import sqlite as sqlite_module

    opened: list[sqlite3.Connection] = []
    real_connect = sqlite_module.connect

    def tracking_connect(path: str | Path) -> sqlite3.Connection:
        opened.append(real_connect(path))
        return opened[-1]

    for module in ("sqlite_sessions", "sqlite_memory", "sqlite_rag"):
        monkeypatch.setattr(f"agentloop.adapters.{module}.connect", tracking_connect)
    return opened


def assert_all_closed(connections: list[sqlite3.Connection]) -> None:
    assert len(connections) == 3
    for conn in connections:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")


def test_a_failed_open_leaves_no_connection_behind(tmp_path: Path, connections: list[sqlite3.Connection]) -> None:
    stores = BotStores.open(tmp_path, embedder=HashingEmbedder(dim=64))
    stores.rag.add(Scope(), "a text indexed at dim 64")
    stores.close()
    connections.clear()
    with pytest.raises(ValueError, match="dim 64 but the embedder makes dim 32"):
        BotStores.open(tmp_path, embedder=HashingEmbedder(dim=32))
    assert_all_closed(connections)


def test_standard_pipeline_closes_the_stores_it_opened_when_building_fails(
    tmp_path: Path, connections: list[sqlite3.Connection]
) -> None:
    with pytest.raises(ValueError, match="max_llm_calls"):
        standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path, options=StandardOptions(max_llm_calls=0))
    assert_all_closed(connections)
