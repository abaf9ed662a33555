"""What the serving tests share: a token file, settings on scratch stores, an in-process client, a gated model."""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import attrs
import httpx

from agentloop import AgentContext, AgentLoop, LlmReply, LlmRequest, Role, System, tool
from agentloop.messages import Finished, StreamEvent, TextDelta
from agentloop.adapters import open_note_taking
from agentloop.notes import KnowledgeItem, NoteType
from agentloop.ports import LLM, Channel, Stores
from agentloop.serve import Caller, ServeSettings, create_app
from agentloop.testing import ScriptedLLM
from agentloop.testing.http import ScriptedServer, completion, free_port, wait_until_healthy
from systems import StandardPipeline, standard_pipeline

ALICE, BOB, CAROL = "alice-token-0123456789", "bob-token-0123456789ab", "carol-token-0123456789"
ACME_ADMIN, SUPPORT_ADMIN = "acme-admin-token-0123456789", "support-admin-token-0123456"
"""Admins (role = "admin") of the org acme and of its team support."""
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

[[tokens]]
token = "{ACME_ADMIN}"
user = "root"
org = "acme"
role = "admin"

[[tokens]]
token = "{SUPPORT_ADMIN}"
user = "lead"
org = "acme"
team = "support"
role = "admin"
"""


AGENTLOOP = [sys.executable, "-c", "import sys; from agentloop.cli import main; sys.exit(main())"]
"""The `agentloop` command of this checkout, for a subprocess (`python -m agentloop.cli` would load the CLI module twice)."""
HELLO = "Hello from the model."
"""What the model of `serve_command` answers."""


@attrs.define
class ServeRun:
    """`agentloop serve` run by `serve_command`: its URL and first line while it runs, its exit
    status and the rest of its output once stopped."""

    url: str
    first_line: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@contextmanager
def serve_command(tmp_path: Path, *options: str, env: Mapping[str, str]) -> Iterator[ServeRun]:
    """`agentloop serve OPTIONS` in `tmp_path` on a free port, with the token file, data in data/ (unless OPTIONS
    name --stores) and a model server answering `HELLO`; healthy when yielded, stopped with SIGTERM after."""
    (tmp_path / "tokens.toml").write_text(TOKENS)
    with ScriptedServer() as model:
        model.reply(body=completion(HELLO))
        process, run = _started(tmp_path, options, env, model.url)
        try:
            yield run
        finally:
            process.send_signal(signal.SIGTERM)
            run.stdout, run.stderr = process.communicate(timeout=60)
            run.returncode = process.returncode


def _started(tmp_path: Path, options: Sequence[str], env: Mapping[str, str], model_url: str) -> tuple[subprocess.Popen[str], ServeRun]:
    """`agentloop serve` answering on a free port: started again on another port when the one picked was taken
    meanwhile (another test's server bound it first); AssertionError with its stderr if it does not come up."""
    for attempt in range(3):
        port = free_port()
        process = subprocess.Popen(
            [*AGENTLOOP, "serve", *options, "--tokens", "tokens.toml", *(() if "--stores" in options else ("--data-dir", "data")),
             "--base-url", model_url, "--model", "tiny", "--port", str(port)],
            cwd=tmp_path, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert process.stdout is not None
        run = ServeRun(f"http://127.0.0.1:{port}", process.stdout.readline())
        try:
            wait_until_healthy(run.url, process)
            return process, run
        except AssertionError:
            if process.poll() is None:
                process.kill()
            _, stderr = process.communicate(timeout=60)
            if "address already in use" in stderr.lower() and attempt < 2:
                continue
            raise AssertionError(f"the server did not come up: {stderr[-2000:]}") from None
    raise AssertionError("the server did not come up: every port picked was taken")


def say_hi(url: str) -> tuple[str, str]:
    """A new session of ALICE's at the server at `url`, and its answer to "hi": (session id, text)."""
    session: str = httpx.post(f"{url}/v1/sessions", headers=auth(ALICE)).json()["session_id"]
    reply = httpx.post(f"{url}/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE), timeout=30)
    text: str = reply.json()["text"]
    return session, text


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


@tool
def report(options: str) -> str:
    """Run the report script with command-line options (argparse exits on options it does not know)."""
    parser = argparse.ArgumentParser(prog="report")
    parser.add_argument("--days", type=int, required=True)
    return f"report over {parser.parse_args(options.split()).days} days"


def _report_or_answer(request: LlmRequest) -> LlmReply | str:
    """Calls `report` with the user's text when it starts with "report ", else answers; then says what the tool said."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return f"the report said: {last.content}"
    text = last.content or ""
    if text.startswith("report "):
        return ScriptedLLM.tool_call("report", {"options": text.removeprefix("report ")})
    return f"echo: {text}"


def argparse_tool_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot with a tool that runs argparse on what the model chose: bad options raise SystemExit."""
    return standard_pipeline(ScriptedLLM(_report_or_answer), channel, stores=stores, tools=[report])


class Blocking:
    """The events of `blocking_tool_bot`'s tool: it sets `entered`, blocks until `release`, then sets `returned`."""

    entered = threading.Event()
    release = threading.Event()
    returned = threading.Event()

    @classmethod
    def reset(cls) -> None:
        for event in (cls.entered, cls.release, cls.returned):
            event.clear()


@tool
def blocking_lookup() -> str:
    """Look something up in a slow system, blocking the calling thread."""
    Blocking.entered.set()
    Blocking.release.wait(10)
    Blocking.returned.set()
    return "found it"


def blocking_tool_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot whose model calls a plain `def` tool that blocks until `Blocking.release`."""
    llm = ScriptedLLM(lambda request: "done" if request.messages[-1].role is Role.TOOL else ScriptedLLM.tool_call("blocking_lookup", {}))
    return standard_pipeline(llm, channel, stores=stores, tools=[blocking_lookup])


class _LoopKiller(System):
    """Ends the event loop the turn runs on with SystemExit: what a crash of the server looks like."""

    order: ClassVar[int] = 0

    async def process(self, ctx: AgentContext) -> None:
        asyncio.get_running_loop().call_soon(sys.exit, 3)
        await asyncio.sleep(30)  # the loop ends before this turn could answer


def crashing_pipeline() -> AgentLoop:
    """A pipeline whose first turn brings the server's event loop down."""
    return AgentLoop([_LoopKiller()])
