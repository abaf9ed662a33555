"""The bot the worker-process tests run (`agentloop worker --pipeline tests.unit.worker_bot:factory`).

The standard pipeline on the worker's stores, with a model that echoes the message after
`$AGENTLOOP_TEST_LATENCY` seconds, and a record of every turn's start and end and of
every reply sent, one JSON line each in `$AGENTLOOP_TEST_RECORDS/<pid>.jsonl`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from agentloop import AgentContext, Attachment, LlmRequest, Session, System
from agentloop.ports import Stores
from agentloop.testing import ScriptedLLM
from systems import StandardPipeline, standard_pipeline


class Records:
    """Appends one JSON line per event to this process's file."""

    def __init__(self) -> None:
        self.path = Path(os.environ["AGENTLOOP_TEST_RECORDS"]) / f"{os.getpid()}.jsonl"

    def write(self, event: str, session_id: str, text: str) -> None:
        line = json.dumps({"event": event, "session": session_id, "text": text, "at": time.time(), "pid": os.getpid()})
        with self.path.open("a") as file:
            file.write(line + "\n")


class RecordedChannel:
    """A channel whose every send is a `sent` record."""

    def __init__(self, records: Records) -> None:
        self.records = records

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self.records.write("sent", session.id, text)

    async def send_voice(self, session: Session, text: str) -> None:
        self.records.write("sent", session.id, text)

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        self.records.write("sent", session.id, attachment.name)


class TurnStarted(System):
    order: ClassVar[int] = 0

    def __init__(self, records: Records) -> None:
        self.records = records

    def process(self, ctx: AgentContext) -> None:
        self.records.write("start", ctx.session.id, ctx.incoming.text)


class TurnEnded(System):
    order: ClassVar[int] = 1000
    always_run: ClassVar[bool] = True

    def __init__(self, records: Records) -> None:
        self.records = records

    def process(self, ctx: AgentContext) -> None:
        self.records.write("end", ctx.session.id, ctx.incoming.text)


def echo(request: LlmRequest) -> str:
    return f"echo: {request.messages[-1].content}"


def factory(stores: Stores) -> StandardPipeline:
    records = Records()
    llm: Any = ScriptedLLM(echo, latency=float(os.environ.get("AGENTLOOP_TEST_LATENCY", "0.005")))
    pipeline = standard_pipeline(llm, RecordedChannel(records), stores=stores)
    return pipeline.insert(TurnStarted(records)).insert(TurnEnded(records))
