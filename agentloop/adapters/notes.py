"""`open_note_taking`: note-taking wired with the embedded defaults (SQLite, hnswlib,
the hashing embedder, maintainer notices in the log)."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.notifier import LogNotifier
from agentloop.adapters.sqlite_knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore
from agentloop.names import check_bot_name
from agentloop.notes import (
    CaptureSettings,
    DistillationSettings,
    Distiller,
    KnowledgeBase,
    NoteTaking,
    QualityRules,
    RetrievalSettings,
    TrajectoryRecorder,
)
from agentloop.ports import LLM, Clock, Embedder, MaintainerNotifier, Metrics


def open_note_taking(
    data_dir: str | os.PathLike[str],
    llm: LLM,
    *,
    bot: str = "bot",
    embedder: Embedder | None = None,
    notifier: MaintainerNotifier | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    capture: CaptureSettings | None = None,
    distillation: DistillationSettings | None = None,
    retrieval: RetrievalSettings | None = None,
    rules: QualityRules | None = None,
    company_id: str = "default",
    rng: random.Random | None = None,
) -> NoteTaking:
    """Open (or create) `<data_dir>/<bot>.trajectories.sqlite3` and
    `<data_dir>/<bot>.notes.sqlite3` (its hnswlib index beside it) and wire note-taking.

    Start the capture writer with `note_taking.recorder.start()` or `with note_taking:`;
    `close()` drains capture and saves the index. `bot` names files, so it follows the
    safe-name rule of `BotStores.open` (ValueError otherwise).
    """
    check_bot_name(bot)
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    embedder = embedder or HashingEmbedder()
    with contextlib.ExitStack() as opened:  # a store already open is closed if a later step fails
        trajectories = SqliteTrajectoryStore(directory / f"{bot}.trajectories.sqlite3")
        opened.callback(trajectories.close)
        repository = SqliteKnowledgeRepository(directory / f"{bot}.notes.sqlite3", dim=embedder.dim)
        opened.callback(repository.close)
        recorder = TrajectoryRecorder(trajectories, settings=capture, clock=clock, metrics=metrics, rng=rng)
        knowledge = KnowledgeBase(
            repository, embedder, notifier=notifier or LogNotifier(), rules=rules, settings=retrieval,
            clock=clock, metrics=metrics,
        )
        distiller = Distiller(llm, knowledge, trajectories, settings=distillation, clock=clock, metrics=metrics)
        notes = NoteTaking(recorder, distiller, knowledge, company_id=company_id, resources=(repository, trajectories))
        opened.pop_all()
    return notes
