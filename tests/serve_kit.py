"""What the serving tests share: a token file, settings on scratch stores, an in-process client, a gated model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx

from agentloop import AgentContext, AgentLoop, LlmReply, LlmRequest, System, tool
from agentloop.messages import Finished, StreamEvent, TextDelta
from agentloop.adapters import open_note_taking
from agentloop.notes import KnowledgeItem, NoteType
from agentloop.ports import LLM, Channel, Stores
from agentloop.serve import Caller, ServeSettings, create_app
from agentloop.testing import ScriptedLLM
from systems import StandardPipeline, standard_pipeline

ALICE, BOB, CAROL = "alice-token-0123456789", "bob-token-0123456789ab", "carol-token-0123456789"
TOKENS = f"""
secret = "a-test-secret-of-enough-length"

[[tokens]]
token = "{ALICE}"
user = "alice"
org = "acme"
team = "support"

[[tokens]]
token = "{BOB}"
user = "bob"
org = "globex"

[[tokens]]
token = "{CAROL}"
user = "alice"
org = "acme"
team = "sales"
"""


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def settings(tmp_path: Path, llm: Any = None, **overrides: Any) -> ServeSettings:
    """Settings serving the standard bot on stores in `tmp_path`, answering with `llm` (an echo by default)."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    model = llm if llm is not None else ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")
    return ServeSettings(tokens=tokens, llm=model, **{"stores": str(tmp_path / "stores"), **overrides})


@asynccontextmanager
async def client(served: ServeSettings) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the app of `served`, in process, with the app's lifespan running."""
    app = create_app(served)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve.test") as http:
            yield http


async def new_session(http: httpx.AsyncClient, token: str = ALICE) -> str:
    created = await http.post("/v1/sessions", headers=auth(token))
    assert created.status_code == 201, created.text
    session_id: str = created.json()["session_id"]
    return session_id


class GatedLLM:
    """Streams its first words, then waits for `release` (set from any thread) before the rest: a model still writing."""

    model = "gated"

    def __init__(self, first: str, rest: str) -> None:
        self.first, self.rest = first, rest
        self.release = threading.Event()
        self.finished = False

    async def complete(self, request: LlmRequest) -> LlmReply:
        raise NotImplementedError("the server streams")

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(self.first)
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        yield TextDelta(self.rest)
        self.finished = True
        yield Finished(LlmReply(self.first + self.rest, model=self.model))


class _Broken(System):
    """A system whose turn escapes the loop: the pipeline's outcome can never be read."""

    order: ClassVar[int] = 0

    def process(self, ctx: AgentContext) -> None:
        return None


class _BrokenLoop(AgentLoop):
    async def run_turn(self, *args: Any, **kwargs: Any) -> AgentContext:
        raise RuntimeError("internal detail: the database password is hunter2")


def broken_pipeline() -> AgentLoop:
    """A pipeline whose turns raise out of the loop (a bug in the server's stack, not in a system)."""
    return _BrokenLoop([_Broken()])


def seed_note(stores: str, text: str, caller: Caller) -> int:
    """Store a note that sessions of `caller`'s chain can be shown; returns its key."""
    with open_note_taking(stores, ScriptedLLM()) as notes:
        chain = notes.chain(caller.session("seeding"))
        item = KnowledgeItem(NoteType.PATTERN, chain.narrowest(), chain, text[:20], text, notes.knowledge.embed(text), datetime.now(UTC))
        return asyncio.run(notes.knowledge.add(item)).key


def usefulness(stores: str, key: int) -> int:
    with open_note_taking(stores, ScriptedLLM()) as notes:
        return asyncio.run(notes.knowledge.get(key)).usefulness_score


deleted: list[str] = []
"""What `delete_file` deleted, in order (cleared by the tests that use it)."""


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    deleted.append(path)
    return f"deleted {path}"


def approval_bot(llm: LLM, channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot with a tool that runs only once the user approves it."""
    return standard_pipeline(llm, channel, stores=stores, tools=[delete_file])
