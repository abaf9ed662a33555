"""`open_note_taking`: note-taking wired on a bot's stores, with maintainer notices in the log."""

from __future__ import annotations

import contextlib
import os
import random

from agentloop.adapters.notifier import LogNotifier
from agentloop.adapters.stores import open_stores
from agentloop.ports.stores import Stores
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
from agentloop.scopes import DEFAULT_COMPANY


def open_note_taking(
    stores: Stores | str | os.PathLike[str],
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
    company_id: str = DEFAULT_COMPANY,
    rng: random.Random | None = None,
) -> NoteTaking:
    """Wire note-taking on a bot's open `stores` (its trajectories and knowledge, with
    their embedder), or on the stores at a URL or directory, opened with `bot` and
    `embedder` as `open_stores` does and closed by the note-taking's `close()`.

    `retrieval` defaults to `RetrievalSettings` with the stores' `hybrid` weights.
    Start the capture writer with `note_taking.recorder.start()` or `with note_taking:`;
    `close()` drains capture (and closes the stores only if it opened them).
    """
    owned: tuple[Stores, ...] = ()
    if isinstance(stores, Stores):
        if embedder is not None or bot != "bot":
            raise ValueError("open stores already have their bot and embedder; pass bot and embedder to open_stores")
        opened = stores
    else:
        opened = open_stores(stores, bot=bot, embedder=embedder)
        owned = (opened,)
    with contextlib.ExitStack() as closing:  # stores opened here are closed if wiring fails
        for resource in owned:
            closing.callback(resource.close)
        recorder = TrajectoryRecorder(opened.trajectories, settings=capture, clock=clock, metrics=metrics, rng=rng)
        knowledge = KnowledgeBase(
            opened.knowledge, opened.embedder, notifier=notifier or LogNotifier(), rules=rules,
            settings=retrieval or RetrievalSettings(hybrid=opened.hybrid),
            clock=clock, metrics=metrics,
        )
        distiller = Distiller(llm, knowledge, opened.trajectories, settings=distillation, clock=clock, metrics=metrics)
        notes = NoteTaking(recorder, distiller, knowledge, company_id=company_id, resources=owned)
        closing.pop_all()
    return notes
