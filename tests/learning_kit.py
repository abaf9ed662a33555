"""A bot whose work is worth a note, for the learning loop's end-to-end test: an orders export
over a rate-limited API, its tools moving a simulated clock so a session lasts 30 s."""

from __future__ import annotations

from typing import Any

from agentloop import AgentLoop, tool
from agentloop.adapters import Stores, open_note_taking
from agentloop.notes import NoteTaking
from agentloop.ports import LLM, Channel
from agentloop.testing import FakeClock
from systems import StandardPipeline, add_note_taking, standard_pipeline

NOTE = """## Context
Exporting the orders table through a rate-limited API

## Solution
Page through rate-limited APIs one page at a time, then check the row count.

## Key Patterns
- fetch_page for each page, then count_rows

## Tags
export, pagination
"""


class ExportBot:
    """The standard pipeline with the export tools and note-taking; closing it drains capture."""

    def __init__(self, pipeline: StandardPipeline, note_taking: NoteTaking) -> None:
        self.pipeline = pipeline
        self.note_taking = note_taking

    def build(self) -> AgentLoop:
        return self.pipeline.build()

    def close(self) -> None:
        self.note_taking.close()
        self.pipeline.close()


def export_bot(llm: LLM, channel: Channel, stores: Stores) -> Any:
    """The factory `agentloop serve --pipeline learning_kit:export_bot` builds."""
    clock = FakeClock()

    @tool
    def fetch_page(page: int) -> str:
        """Fetch one page of the orders export."""
        clock.advance(15)
        return f"page {page}: 500 rows"

    @tool
    def count_rows() -> str:
        """Count the exported rows."""
        clock.advance(15)
        return "1000 rows"

    note_taking = open_note_taking(stores, llm, clock=clock)
    note_taking.recorder.start()
    pipeline = standard_pipeline(llm, channel, stores=stores, tools=[fetch_page, count_rows], clock=clock)
    return ExportBot(add_note_taking(pipeline, note_taking), note_taking)
