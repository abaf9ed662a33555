"""The `agentloop` command: argparse over the composition root in `agentloop.bots`.

Every command that runs or inspects a bot opens it with `open_bot` (or builds the user's
pipeline with `built_pipeline`), so the demo, chat, notes and `pipeline show` see the
same standard pipeline; a `BotError` those raise is printed as one line, like a `CliError`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import json
import os
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs
import structlog

from agentloop.adapters import (
    ConsoleChannel,
    HashingEmbedder,
    Stores,
    open_note_taking,
    open_stores,
    reembed_stores,
    stores_exist,
)
from agentloop.adapters.urls import is_postgres_url, shown_url
from agentloop.bots import (
    API_KEY_VARIABLES,
    DEFAULT_BASE_URL,
    BotError,
    built_pipeline,
    http_llm,
    open_bot,
    pipeline_note_taking,
    start_otel,
    stores_url,
    user_tools,
)
from agentloop.context import IncomingMessage, Session
from agentloop.scopes import DEFAULT_COMPANY, approval_scope
from agentloop.adapters.errors import EmbedderMismatchError, NewerSchemaError, StoreUrlError
from agentloop.errors import AgentloopError, DemoCheckError, LlmCallError, StoreError
from agentloop.notes.errors import InvalidNoteTransitionError, UnknownNoteError
from agentloop.tasks.errors import ContextManagementWarning, TaskError, TemplateError, UnknownTemplateError
from agentloop.logging import configure_logging
from agentloop.loop import AgentLoop, PipelineDescription
from agentloop.messages import LlmRequest, Role
from agentloop.demo import run_demo
from agentloop.notes import IdleSessions, KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteStatus, NoteTaking
from agentloop.ports import LLM, ApprovalStore, Channel, Embedder
from agentloop.tasks import Evaluator, TaskTrace, TaskTurn, TemplateRegistry, validate_path
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.terminal import terminal_line, terminal_text

DEFAULT_DATA_DIR = "agentloop-data"
DEFAULT_MODEL = "llama3.1"
EXIT_STATUS = "exit status: 0 success; 1 an error, explained in one line on stderr; 2 a usage error."


class CliError(AgentloopError):
    """A problem the user can fix; printed as one line, exit status 1."""


def describe_pipeline(target: str, out: TextIO) -> PipelineDescription:
    """Import `module:factory` and describe the pipeline it builds; a factory that takes `llm`,
    `channel` or `stores` gets a scripted model, the console and stores in a scratch directory."""
    with ExitStack() as stack:

        def scratch_stores() -> Stores:
            return stack.enter_context(open_stores(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-show-"))))

        offered: dict[str, Callable[[], Any]] = {"llm": ScriptedLLM, "channel": lambda: ConsoleChannel(out), "stores": scratch_stores}
        with built_pipeline(target, offered) as loop:
            return loop.describe()


def echo_instruction(request: LlmRequest) -> str:
    """The offline model of `tasks run --scripted`: answers with the task's instruction.

    The instruction is the first paragraph of the last user message (a task turn's
    prompt starts with it), so a run shows how inputs were substituted and in what
    order the tasks ran, without a model.
    """
    user = next((m.content for m in reversed(request.messages) if m.role is Role.USER and m.content), "")
    instruction = user.split("\n\n")[0].strip()
    return f"[scripted] {instruction}"


def _pipeline_show(args: argparse.Namespace, out: TextIO) -> int:
    if args.target is not None:
        description = describe_pipeline(args.target, out)
    else:
        with tempfile.TemporaryDirectory(prefix="agentloop-show-") as scratch, open_bot(
            scratch, ScriptedLLM(), ConsoleChannel(out)
        ) as bot:
            description = bot.loop.describe()
    print(description.to_mermaid() if args.mermaid else description.to_text(), file=out)
    return 0


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    with ExitStack() as stack:
        stores: str | Path
        if args.stores is not None:
            stores = args.stores
            try:
                taken = stores_exist(stores)
            except StoreUrlError as error:
                raise CliError(str(error)) from error
            if taken:
                raise CliError(
                    f"the bot 'bot' already has stores at {shown_url(args.stores)}; the demo's story starts from a new bot, "
                    "so give --stores a place with no bot named 'bot' (a new database or directory)"
                )
        elif args.data_dir is None:
            stores = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-demo-")))
        else:
            stores = Path(args.data_dir)
            if stores.exists() and not stores.is_dir():
                raise CliError(f"{stores} is a file, not a directory; give a new or empty directory as --data-dir")
            if stores.exists() and any(stores.iterdir()):
                raise CliError(f"{stores} is not empty; the demo's story starts from a new bot, so give a new or empty --data-dir")
        temporary = args.stores is None and args.data_dir is None
        try:
            asyncio.run(run_demo(open_bot, stores, out=out, progress=sys.stderr, temporary=temporary))
        except DemoCheckError as error:
            raise CliError(f"demo failed: {error}") from error
    return 0


SPINNER_FRAMES = "|/-\\"


class Spinner:
    """A sign of life on a terminal while the model has not answered: frames on `stream`,
    started with a turn and wiped by `stop` (before the first token is printed)."""

    def __init__(self, stream: TextIO, *, interval: float = 0.1) -> None:
        self.stream = stream
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._spin())

    async def _spin(self) -> None:
        for frame in itertools.cycle(SPINNER_FRAMES):
            self.stream.write(f"\r{frame} waiting for the model")
            self.stream.flush()
            await asyncio.sleep(self.interval)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@attrs.define
class Chat:
    """A conversation at the console: the loop that runs its turns, the note-taking that
    ends it, the spinner shown while a turn waits (on a terminal), and the store of tool
    calls awaiting the user's approval."""

    loop: AgentLoop
    note_taking: NoteTaking
    session: Session
    spinner: Spinner | None = None
    last_turn: str | None = None
    """The id of the last turn answered: what /good and /bad rate."""
    satisfied: bool = True
    approvals: ApprovalStore | None = None


def _chat(args: argparse.Namespace, out: TextIO) -> int:
    llm = http_llm(args.base_url, args.model, provider=args.provider)
    spinner = Spinner(sys.stderr) if sys.stderr.isatty() else None
    channel = ConsoleChannel(out, before_output=spinner.stop if spinner is not None else None)
    with ExitStack() as stack:
        stack.enter_context(otel_from_environment(args.otel, "agentloop-chat"))
        if args.pipeline is None:
            tools = user_tools(args.tools) if args.tools is not None else []
            bot = stack.enter_context(open_bot(stores_url(args), llm, channel, bot=args.bot, tools=tools))
            loop, note_taking, stores = bot.loop, bot.note_taking, bot.pipeline.stores
        else:
            loop, note_taking, stores = _user_bot(stack, args, llm, channel)
        if args.timeout is not None:
            loop.turn_timeout = args.timeout
        session = Session(args.session, user_id=args.user)
        chat = Chat(loop, note_taking, session, spinner, approvals=None if stores is None else stores.approvals)
        status = converse(chat, sys.stdin)
    return status


def _user_bot(
    stack: ExitStack, args: argparse.Namespace, llm: LLM, channel: Channel
) -> tuple[AgentLoop, NoteTaking, Stores]:
    """The pipeline of `--pipeline MODULE:FACTORY` on the bot's stores, the note-taking that ends
    its sessions (the pipeline's own when it has one: it holds what was captured), and the stores."""
    try:
        opened = stack.enter_context(open_stores(stores_url(args), bot=args.bot))
        offered: dict[str, Callable[[], Any]] = {"llm": lambda: llm, "channel": lambda: channel, "stores": lambda: opened}
        loop = stack.enter_context(built_pipeline(args.pipeline, offered))
        note_taking = pipeline_note_taking(loop) or stack.enter_context(open_note_taking(opened, llm))
    except StoreUrlError as error:
        raise CliError(str(error)) from error
    except (OSError, ValueError, sqlite3.Error) as error:
        raise CliError(f"cannot open the bot {args.bot!r} in {stores_url(args)}: {error}") from error
    return loop, note_taking, opened


def converse(chat: Chat, lines: TextIO) -> int:
    """One turn per non-empty line until end of input, /quit, /bye or Ctrl-C; then the session
    ends (and is distilled; after /bye, always said on stderr). Returns the exit status: 130
    after Ctrl-C at the prompt, else 0. `/approve` and `/deny [note]` answer the session's
    oldest tool call awaiting approval.

    The prompt is read outside the event loop, so Ctrl-C there stops at once; Ctrl-C during
    a turn cancels that turn and the prompt comes back.
    """
    interactive = lines.isatty()
    report = interactive
    status = 0
    with asyncio.Runner() as runner:
        try:
            while True:
                if interactive:
                    print("you> ", end="", file=sys.stderr, flush=True)
                try:
                    line = lines.readline()
                except KeyboardInterrupt:
                    status = 130
                    print(file=sys.stderr)
                    break
                text = line.strip()
                if not line or text in ("/quit", "/exit", "/bye"):
                    if not line and interactive:
                        print(file=sys.stderr)
                    report = report or text == "/bye"
                    break
                command, _, note = text.partition(" ")
                if text in ("/good", "/bad"):
                    runner.run(_feedback(chat, positive=text == "/good"))
                elif text:
                    try:
                        if command in ("/approve", "/deny"):
                            runner.run(_decide(chat, approved=command == "/approve", note=note.strip() or None))
                        else:
                            runner.run(_turn(chat, IncomingMessage(text)))
                    except KeyboardInterrupt:
                        print("\nagentloop: turn cancelled", file=sys.stderr)
        finally:
            runner.run(_leave(chat, report=report))
    return status


async def _turn(chat: Chat, incoming: IncomingMessage) -> None:
    """Run one turn, the spinner turning until the answer starts; failures go to stderr."""
    if chat.spinner is not None:
        chat.spinner.start()
    try:
        ctx = await chat.loop.run_turn(chat.session, incoming)
    finally:
        if chat.spinner is not None:
            chat.spinner.stop()
    chat.last_turn = ctx.turn_id
    for failure in ctx.failures:
        print(terminal_line(f"agentloop: {failure.source.value} {failure.component} failed: {failure.message}"), file=sys.stderr)


async def _decide(chat: Chat, *, approved: bool, note: str | None) -> None:
    """Answer the session's oldest tool call awaiting approval with a turn that runs it or tells the model it was denied."""
    waiting = [] if chat.approvals is None else await chat.approvals.pending(approval_scope(chat.session), chat.session.id)
    if not waiting:
        print("agentloop: no tool call awaits your approval in this session", file=sys.stderr)
        return
    await _turn(chat, IncomingMessage.approval(waiting[0].request.approval_id, approved=approved, note=note))


async def _feedback(chat: Chat, *, positive: bool) -> None:
    """The user's verdict on the last answer: credits the notes that turn was shown."""
    if chat.last_turn is None:
        print("agentloop: nothing to rate yet; /good or /bad rate the last answer of this session", file=sys.stderr)
        return
    chat.satisfied = positive
    credited = await chat.note_taking.record_feedback(chat.session, positive=positive, turn_id=chat.last_turn)
    noted = f"; credited note(s) {', '.join(f'#{item.id}' for item in credited)}" if credited else ""
    print(f"agentloop: feedback recorded ({'good' if positive else 'bad'}){noted}", file=sys.stderr)


async def _leave(chat: Chat, *, report: bool) -> None:
    """End the session, successful unless the user's last verdict was /bad, so it is distilled;
    with `report`, say on stderr what distillation made of it."""
    if chat.last_turn is not None:
        result = await chat.note_taking.end_session(chat.session, success=chat.satisfied)
        if report:
            print(terminal_line(f"agentloop: session {chat.session.id!r} ended; distillation {result.status.value} ({result.reason})"),
                  file=sys.stderr)


@contextmanager
def _knowledge(args: argparse.Namespace, out: TextIO) -> Iterator[KnowledgeBase]:
    """The knowledge base of an existing bot (opened with a placeholder model: no turn runs)."""
    with open_bot(stores_url(args), ScriptedLLM(), ConsoleChannel(out), bot=args.bot, create=False) as bot:
        try:
            yield bot.note_taking.knowledge
        except (UnknownNoteError, InvalidNoteTransitionError) as error:
            raise CliError(str(error)) from error


def _note_line(item: KnowledgeItem) -> str:
    flag = "  flagged for review" if item.flagged_for_review else ""
    return (
        f"#{item.id}  {item.status.value:<10} {item.type.value:<10} {item.layer.value:<8} "
        f"retrieved {item.retrieval_count}  useful {item.usefulness_score}  {terminal_line(item.title)}{flag}"
    )


def _caller(args: argparse.Namespace) -> LayerIds:
    """The tenant chain named by --company/--org/--team/--project."""
    return LayerIds(args.company or DEFAULT_COMPANY, org_id=args.org, team_id=args.team, project_id=args.project)


def _within(caller: LayerIds) -> str:
    return f"within {caller.narrowest().value} {caller.id_at(caller.narrowest())!r} and its parents"


def _notes_list(args: argparse.Namespace, out: TextIO) -> int:
    statuses = None if args.status is None else frozenset({NoteStatus(args.status)})
    chained = any(value is not None for value in (args.company, args.org, args.team, args.project))
    with _knowledge(args, out) as knowledge:
        items = asyncio.run(knowledge.repository.items(statuses))
    if chained:
        visible = _caller(args).visible_owners()
        items = [item for item in items if item.layer_ids in visible]
    for item in items:
        print(_note_line(item), file=out)
    if not items:
        status = "" if args.status is None else f" with status {args.status}"
        print(f"no notes{status}" + (f" {_within(_caller(args))}" if chained else ""), file=out)
    return 0


def _notes_show(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        item = asyncio.run(knowledge.get(args.id))
    print(_note_line(item), file=out)
    owner = ", ".join(f"{layer.value}={item.layer_ids.id_at(layer)}" for layer in Layer if item.layer_ids.id_at(layer))
    print(terminal_line(f"owner: {owner}; created {item.created_at.isoformat()}; referenced {item.reference_count}"), file=out)
    print(f"\n{terminal_text(item.markdown.strip())}", file=out)
    return 0


def _notes_search(args: argparse.Namespace, out: TextIO) -> int:
    caller = _caller(args)
    with _knowledge(args, out) as knowledge:
        found = asyncio.run(knowledge.search(args.query, caller, k=args.k))
    for retrieved in found:
        print(f"{retrieved.similarity:.2f}  {_note_line(retrieved.item)}", file=out)
    if not found:
        print(f"no notes match {_within(caller)}", file=out)
    return 0


def _notes_transition(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        before = asyncio.run(knowledge.get(args.id)).status
        after = asyncio.run(knowledge.transition(args.id, args.target))
    print(f"note #{after.id}: {before.value} -> {after.status.value}", file=out)
    return 0


def _notes_merges(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        suggestions = asyncio.run(knowledge.merge_suggestions())
        for suggestion in suggestions:
            first, second = asyncio.run(knowledge.get(suggestion.first_id)), asyncio.run(knowledge.get(suggestion.second_id))
            titles = f"#{first.id} {first.title!r} + #{second.id} {second.title!r}"  # repr escapes what a terminal would run
            print(f"{titles}: similarity {suggestion.similarity:.2f}", file=out)
    if not suggestions:
        print("no merge suggestions", file=out)
    return 0


def _templates_validate(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.path)
    if not path.exists():
        raise CliError(f"{path} does not exist; give a template file or a directory of *.xml files")
    report = validate_path(path)
    if not report.files:
        raise CliError(f"no *.xml templates under {path}")
    for line in report.lines():
        print(terminal_text(line), file=out)
    verdict = "ok" if report.ok else "invalid"
    print(f"{verdict}: {len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)", file=out)
    return 0 if report.ok else 1


def parse_inputs(pairs: Sequence[str]) -> dict[str, str | list[str]]:
    """`k=v` pairs as task inputs; a name given more than once becomes a list (the items of a reduce)."""
    inputs: dict[str, str | list[str]] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise CliError(f"--input expects NAME=VALUE, got {pair!r}")
        earlier = inputs.get(name)
        if earlier is None:
            inputs[name] = value
        else:
            inputs[name] = [*([earlier] if isinstance(earlier, str) else earlier), value]
    return inputs


def load_registry(path: Path, *, allow_scripts: bool) -> TemplateRegistry:
    """The templates of a file or directory; their warnings are printed on stderr."""
    if not path.exists():
        raise CliError(f"{path} does not exist; pass --templates FILE_OR_DIR")
    registry = TemplateRegistry(allow_scripts=allow_scripts)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ContextManagementWarning)
            loaded = registry.register_directory(path) if path.is_dir() else registry.register_file(path)
    except TemplateError as error:
        raise CliError(str(error)) from error
    for notice in loaded.warnings:
        print(f"agentloop: warning: {notice}", file=sys.stderr)
    return registry


def _tasks_run(args: argparse.Namespace, out: TextIO) -> int:
    inputs = parse_inputs(args.input)
    registry = load_registry(Path(args.templates), allow_scripts=args.allow_scripts)
    try:
        registry.get(args.template)
    except UnknownTemplateError as error:
        raise CliError(f"{error} from {args.templates}") from error
    llm: LLM = ScriptedLLM(echo_instruction) if args.scripted else http_llm(args.base_url, args.model, provider=args.provider)
    trace = TaskTrace()
    with open_bot(stores_url(args), llm, ConsoleChannel(out), bot=args.bot, inputs=(TaskTurn,)) as bot:
        evaluator = Evaluator(registry, bot.loop, session=Session(f"tasks-{args.template}"))
        try:
            result = asyncio.run(evaluator.run(args.template, inputs, trace=trace))
        except (TaskError, TemplateError) as error:
            raise CliError(f"task {args.template!r} failed after {trace.turns} turn(s): {error}") from error
    if args.trace:
        print(terminal_text(trace.render()), end="\n\n", file=out)
    print(terminal_text(result.content), file=out)
    if result.notes:
        print(terminal_line(f"notes: {json.dumps(result.notes, ensure_ascii=False, default=repr)}"), file=out)
    return 0


def embedder_from_spec(spec: str, *, base_url: str) -> Embedder:
    """The embedder a command-line SPEC names: `hashing[:DIM]`, `openai:MODEL` (at
    `base_url`, key from the environment) or `st:DIR_OR_NAME` (a local sentence-transformers model)."""
    kind, _, detail = spec.partition(":")
    try:
        if kind == "hashing":
            return HashingEmbedder(int(detail)) if detail else HashingEmbedder()
        if kind == "openai" and detail:
            from agentloop.adapters.embedders.openai import OpenAIEmbedder

            api_key = next((os.environ[name] for name in API_KEY_VARIABLES if os.environ.get(name)), None)
            return OpenAIEmbedder(base_url, detail, api_key=api_key)
        if kind == "st" and detail:
            from agentloop.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

            return SentenceTransformerEmbedder(detail)
    except (ValueError, OSError, ImportError, LlmCallError) as error:
        raise CliError(f"cannot make the embedder {spec!r}: {error}") from error
    raise CliError(f"--embedder {spec!r} names no embedder; give hashing, hashing:DIM, openai:MODEL or st:MODEL_DIR")


def _stores_reembed(args: argparse.Namespace, out: TextIO) -> int:
    embedder = embedder_from_spec(args.embedder, base_url=args.base_url)
    try:
        done = reembed_stores(args.url, bot=args.bot, embedder=embedder, batch_size=args.batch_size)
    except StoreUrlError as error:
        raise CliError(str(error)) from error
    except (OSError, ValueError, LlmCallError, sqlite3.Error) as error:
        raise CliError(f"cannot re-embed the bot {args.bot!r} at {args.url}: {error}") from error
    print(f"re-embedded {done.texts} text(s) and {done.notes} note(s) of the bot {args.bot!r} with {embedder.name!r}", file=out)
    return 0


@contextmanager
def otel_from_environment(enabled: bool, service_name: str) -> Iterator[None]:
    """With `--otel` (`enabled`): OpenTelemetry on for the block, flushed when it ends."""
    if not enabled:
        yield
        return
    shutdown = start_otel(service_name)
    try:
        yield
    finally:
        shutdown()


def _workers() -> Any:
    """The `agentloop.workers` package, which needs the postgres extra (procrastinate, psycopg)."""
    try:
        return importlib.import_module("agentloop.workers")
    except ImportError as error:
        raise CliError(f"the inbox and workers need PostgreSQL support: pip install 'agentloop-ecs[postgres]' ({error})") from error


def _is_postgres(url: str) -> bool:
    return is_postgres_url(url)


def _worker(args: argparse.Namespace, out: TextIO) -> int:
    stores = stores_url(args)
    inbox_url = args.inbox or (stores if _is_postgres(stores) else None)
    if inbox_url is None:
        raise CliError("the inbox lives in PostgreSQL: give --inbox postgresql://USER@HOST/DB (it defaults to --stores when that is a postgresql URL)")
    workers = _workers()
    try:
        settings = workers.WorkerSettings(
            concurrency=args.concurrency, stall_timeout=args.stall_timeout, shutdown_grace=args.shutdown_grace
        )
    except ValueError as error:
        raise CliError(f"bad worker setting: {error}") from error
    if args.idle_end is not None and args.idle_end <= 0:
        raise CliError(f"bad worker setting: --idle-end must be a positive number of seconds, not {args.idle_end:g}")
    try:
        with (
            otel_from_environment(args.otel, "agentloop-worker"),
            open_stores(stores, bot=args.bot) as opened,
            built_pipeline(args.pipeline, {"stores": lambda: opened}) as loop,
        ):
            idle = None if args.idle_end is None else _idle_sessions(args.pipeline, loop, args.idle_end)
            asyncio.run(_work(workers, inbox_url, args.bot, loop, settings, shown_url(stores), out, idle))
    except StoreUrlError as error:
        raise CliError(str(error)) from error
    return 0


def _idle_sessions(target: str, loop: AgentLoop, idle_after: float) -> IdleSessions:
    """The watch that ends the sessions of the pipeline of `target` once idle (`--idle-end`)."""
    note_taking = pipeline_note_taking(loop)
    if note_taking is None:
        raise CliError(
            f"--idle-end ends sessions through the pipeline's note-taking, and {target} has none; "
            "plug it in with systems.add_note_taking(pipeline, note_taking)"
        )
    return IdleSessions(note_taking, idle_after=idle_after)


async def _work(
    workers: Any, inbox_url: str, bot: str, loop: AgentLoop, settings: Any, stores: str, out: TextIO,
    idle: IdleSessions | None,
) -> None:
    """Serve the inbox until SIGTERM or SIGINT; one status line when ready and one when stopped."""
    try:
        async with workers.open_inbox(inbox_url, bot=bot, pool_size=settings.concurrency + 4) as inbox:
            print(
                f"agentloop worker {os.getpid()}: bot {bot!r}, inbox {inbox.url}, stores {stores}, "
                f"{settings.concurrency} turns at once; a lost worker's turns restart within "
                f"{settings.recovery_bound:g}s; SIGTERM stops after the turns in flight",
                file=out, flush=True,
            )
            await workers.run_worker(inbox, loop, settings, idle=idle)
    except (workers.InboxUrlError, NewerSchemaError) as error:
        raise CliError(str(error)) from error
    print(f"agentloop worker {os.getpid()}: stopped", file=out, flush=True)


def _stores_migrate(args: argparse.Namespace, out: TextIO) -> int:
    shown = shown_url(args.url)
    embedder = embedder_from_spec(args.embedder, base_url=args.base_url)
    try:
        open_stores(args.url, bot=args.bot, embedder=embedder).close()
    except StoreUrlError as error:
        raise CliError(str(error)) from error
    except (NewerSchemaError, EmbedderMismatchError) as error:
        raise CliError(str(error)) from error
    print(f"stores of bot {args.bot!r} at {shown}: up to date", file=out)
    if _is_postgres(args.url):
        workers = _workers()
        try:
            asyncio.run(workers.migrate_inbox(args.url))
        except (workers.InboxUrlError, NewerSchemaError) as error:
            raise CliError(str(error)) from error
        print(f"inbox at {shown}: up to date (schema version {workers.SCHEMA_VERSION})", file=out)
    return 0


def _data_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    where = options.add_mutually_exclusive_group()
    where.add_argument(
        "--stores", metavar="URL",
        help="the URL of the bot's stores: sqlite:///DIR (relative DIR; sqlite:////abs/dir), or a directory path",
    )
    where.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
        help=f"short for --stores sqlite:///DIR: where the bot's SQLite databases and indexes live (default: ./{DEFAULT_DATA_DIR})",
    )
    options.add_argument("--bot", default="bot", help="the bot's name; its files are DIR/NAME.* (default: bot)")
    return options


def _chain_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--company", help=f"the caller's company id (default: {DEFAULT_COMPANY})")
    for layer in ("org", "team", "project"):
        options.add_argument(f"--{layer}", help=f"the caller's {layer} id")
    return options


def _model_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--provider", choices=("openai", "anthropic"), default="openai",
        help="the API the endpoint speaks: openai (chat completions, the default) or anthropic (the Messages API)",
    )
    options.add_argument(
        "--base-url", metavar="URL",
        help=f"the endpoint (default for openai: $AGENTLOOP_BASE_URL or {DEFAULT_BASE_URL}, Ollama's; for anthropic: Anthropic's API)",
    )
    options.add_argument(
        "--model", default=os.environ.get("AGENTLOOP_MODEL", DEFAULT_MODEL),
        help=f"the model name the endpoint serves (default: $AGENTLOOP_MODEL or {DEFAULT_MODEL})",
    )
    return options


MODEL_EPILOG = (
    "The API key is read from $AGENTLOOP_API_KEY, else $OPENAI_API_KEY ($ANTHROPIC_API_KEY for anthropic; "
    "none is sent if both are unset). "
    "An endpoint that does not answer at all, or that lists its models without the one named, is reported before the first turn."
)


def _embedder_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--embedder", default="hashing", metavar="SPEC",
        help="the embedder: hashing (the default, 384 dimensions), hashing:DIM, openai:MODEL (an embeddings "
        "endpoint at --base-url) or st:MODEL_DIR (a local sentence-transformers model)",
    )
    options.add_argument(
        "--base-url", default=os.environ.get("AGENTLOOP_BASE_URL", DEFAULT_BASE_URL), metavar="URL",
        help=f"the OpenAI-compatible endpoint of openai:MODEL (default: $AGENTLOOP_BASE_URL or {DEFAULT_BASE_URL})",
    )
    return options


def otel_options() -> argparse.ArgumentParser:
    """`--otel`, for the commands that run turns."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--otel", action="store_true",
        help="report spans and metrics through OpenTelemetry, exporters chosen by the standard OTEL_* variables "
        "(OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, ...); needs the otel extra",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentloop", description="Build and run agentloop bots.", epilog=EXIT_STATUS)
    parser.add_argument(
        "--log-level", metavar="LEVEL",
        help="structlog events at this level and above go to stderr: DEBUG, INFO, WARNING, ERROR "
        "(default: WARNING; ERROR for demo, whose failures are staged)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    data, model, chain, otel = _data_options(), _model_options(), _chain_options(), otel_options()

    demo = commands.add_parser(
        "demo", help="run a complete bot offline and check every step",
        description="A travel helper on a scripted model (no network, no API key) runs three sessions: "
        "tools, a rate-limited turn answered with a fallback, recovery, a note distilled at the end of "
        "a session and offered to a later one. Progress goes to stderr, the story to stdout.",
        epilog="exit status: 0 every step behaved as expected; 1 a step misbehaved (the line says which); 2 a usage error.",
    )
    demo_place = demo.add_mutually_exclusive_group()
    demo_place.add_argument(
        "--data-dir", metavar="DIR",
        help="a new or empty directory to keep the bot's files in (default: a temporary directory, removed)",
    )
    demo_place.add_argument(
        "--stores", metavar="URL",
        help="where to keep the bot's stores instead: sqlite:///DIR or postgresql://..., where no bot named 'bot' has stores yet",
    )
    demo.set_defaults(handler=_demo, quiet_log_level="ERROR")

    chat = commands.add_parser(
        "chat", parents=[data, model, otel], help="talk to a bot on an OpenAI-compatible endpoint",
        description="An interactive console bot: one turn per line of standard input (piped input works), "
        "replies streamed to standard output, history and memory kept in the data directory. /good or /bad rate "
        "the last answer; /bye, /quit, end of input (Ctrl-D) or Ctrl-C at the prompt end the session, which is then distilled. "
        "Ctrl-C during a turn cancels that turn.",
        epilog=f"{MODEL_EPILOG} exit status: 0 the session ended; 1 an error, explained in one line on stderr; "
        "2 a usage error; 130 Ctrl-C at the prompt.",
    )
    chat.add_argument("--session", default="console", help="the session id; reuse it to continue a conversation")
    chat.add_argument("--user", default="local", help="the user id (memory is shared across a user's sessions)")
    chat.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="the turn deadline: past it the bot answers with a fallback (default: none)")
    yours = chat.add_mutually_exclusive_group()
    yours.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="your pipeline instead of the standard one: a factory taking llm, channel and stores by name (or nothing), "
        "returning an AgentLoop, a list of systems or a builder",
    )
    yours.add_argument("--tools", metavar="MODULE", help="add the @tool functions (and Tool objects) of MODULE to the standard pipeline")
    chat.set_defaults(handler=_chat)

    pipeline = commands.add_parser("pipeline", help="inspect a pipeline", epilog=EXIT_STATUS)
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    show = pipeline_commands.add_parser(
        "show", help="print the ordered pipeline table or a Mermaid graph",
        description="Print the systems in run order with what each reads and writes: the standard pipeline, "
        "or yours given as MODULE:FACTORY (a callable returning an AgentLoop, a list of systems or a builder; "
        "it may take llm, channel and stores by name, given a scripted model, the console and scratch stores).",
        epilog=EXIT_STATUS,
    )
    show.add_argument("target", nargs="?", metavar="MODULE:FACTORY", help="a factory returning a pipeline (default: the standard pipeline)")
    show.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart instead of a table")
    show.set_defaults(handler=_pipeline_show)

    templates = commands.add_parser("templates", help="check task templates", epilog=EXIT_STATUS)
    templates_commands = templates.add_subparsers(dest="templates_command", required=True, metavar="ACTION")
    validate = templates_commands.add_parser(
        "validate", help="check a template file or every *.xml under a directory",
        description="Load each template as `tasks run` would, registering nothing: errors and warnings "
        "are printed with file and line.",
        epilog="exit status: 0 every template loads (warnings are printed but allowed); 1 an error was found; 2 a usage error.",
    )
    validate.add_argument("path", metavar="PATH", help="a template file or a directory")
    validate.set_defaults(handler=_templates_validate)

    notes = commands.add_parser(
        "notes", help="review the notes a bot distilled", epilog=EXIT_STATUS,
        description="Inspect and curate a bot's knowledge base in its data directory.",
    )
    notes_commands = notes.add_subparsers(dest="notes_command", required=True, metavar="ACTION")
    listing = notes_commands.add_parser(
        "list", parents=[data, chain], help="every note, or those a chain may see, one line each", epilog=EXIT_STATUS,
        description="List the bot's notes. Given any of --company/--org/--team/--project, only the notes a session "
        "of that chain would see are listed; without them, every note of every tenant.",
    )
    listing.add_argument("--status", choices=[s.value for s in NoteStatus], help="only notes with this status")
    listing.set_defaults(handler=_notes_list)
    show_note = notes_commands.add_parser("show", parents=[data], help="one note in full", epilog=EXIT_STATUS)
    show_note.add_argument("id", type=int, metavar="ID")
    show_note.set_defaults(handler=_notes_show)
    search = notes_commands.add_parser(
        "search", parents=[data, chain], help="the notes a query would retrieve (counts nothing)", epilog=EXIT_STATUS,
        description="Search as a session of the given org/team/project would: only notes in that chain are seen.",
    )
    search.add_argument("query", metavar="QUERY")
    search.add_argument("-k", type=int, default=5, help="how many notes at most (default: 5)")
    search.set_defaults(handler=_notes_search)
    for action, target, what in (
        ("propose", NoteStatus.PROPOSED, "draft -> proposed"),
        ("accept", NoteStatus.ACCEPTED, "proposed -> accepted"),
        ("reject", NoteStatus.REJECTED, "draft or proposed -> rejected"),
        ("deprecate", NoteStatus.DEPRECATED, "accepted -> deprecated"),
    ):
        move = notes_commands.add_parser(action, parents=[data], help=f"move a note {what}", epilog=EXIT_STATUS)
        move.add_argument("id", type=int, metavar="ID")
        move.set_defaults(handler=_notes_transition, target=target)
    merges = notes_commands.add_parser("merges", parents=[data], help="pairs of accepted notes worth merging", epilog=EXIT_STATUS)
    merges.set_defaults(handler=_notes_merges)

    tasks = commands.add_parser("tasks", help="run task templates", epilog=EXIT_STATUS)
    tasks_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    run = tasks_commands.add_parser(
        "run", parents=[data, model], help="run a registered task template",
        description="Run TEMPLATE with the standard bot answering each atomic task; prints the result's "
        "content (and its notes). --scripted needs no model: each atomic task answers with its own "
        "instruction, which shows how inputs flow through the template.",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    run.add_argument("template", metavar="TEMPLATE", help="the name of the template to run")
    run.add_argument(
        "--input", action="append", default=[], metavar="NAME=VALUE",
        help="a task input; repeat a name to pass a list (the items a reduce runs over)",
    )
    run.add_argument("--templates", default="templates", metavar="PATH", help="a template file or directory (default: ./templates)")
    run.add_argument("--allow-scripts", action="store_true", help="allow script tasks to run their commands")
    run.add_argument("--scripted", action="store_true", help="answer atomic tasks offline with a scripted echo, no model")
    run.add_argument("--trace", action="store_true", help="print what every task answered before the result")
    run.set_defaults(handler=_tasks_run)

    stores = commands.add_parser("stores", help="manage a bot's stores", epilog=EXIT_STATUS)
    stores_commands = stores.add_subparsers(dest="stores_command", required=True, metavar="ACTION")
    embedding = _embedder_options()
    migrate = stores_commands.add_parser(
        "migrate", parents=[embedding], help="bring a bot's stores (and a PostgreSQL inbox) to this release's schemas",
        description="Open the stores of --bot at URL, migrating every schema that is older (a newer one is refused "
        "and left unchanged), then close them. For a postgresql URL the inbox tables and procrastinate's schema "
        "are created or migrated too. Opening a bot migrates it anyway; this runs it explicitly, before a deploy.",
        epilog=EXIT_STATUS,
    )
    migrate.add_argument("url", metavar="URL", help="sqlite:///DIR, a directory, or postgresql://USER@HOST/DB")
    migrate.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    migrate.set_defaults(handler=_stores_migrate)
    reembed = stores_commands.add_parser(
        "reembed", parents=[embedding], help="embed every stored text and note again with another embedder",
        description="Replace the vectors of every RAG text and note of the bot with those of EMBEDDER and record it, "
        "so the stores open with it from now on (texts and notes are unchanged). Stop the bot first.",
        epilog=EXIT_STATUS,
    )
    reembed.add_argument("url", metavar="URL", help="the bot's stores: sqlite:///DIR, a directory path or postgresql://...")
    reembed.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    reembed.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per embedding call (default: 64)")
    reembed.set_defaults(handler=_stores_reembed)

    worker = commands.add_parser(
        "worker", parents=[data, otel], help="run the turns of a bot's inbox, beside any number of other workers",
        description="Take messages from the bot's durable inbox in PostgreSQL and run their turns through the "
        "pipeline that MODULE:FACTORY builds (its `stores` parameter gets the opened Stores). Turns of one session "
        "run one at a time in submission order across every worker; a worker that dies has its turns run again "
        "by another. Prints one status line; SIGTERM or Ctrl-C stops it after the turns in flight.",
        epilog=EXIT_STATUS,
    )
    worker.add_argument("--pipeline", required=True, metavar="MODULE:FACTORY", help="a factory taking stores (by that name) and returning an AgentLoop, a list of systems or a builder")
    worker.add_argument("--inbox", metavar="URL", help="the PostgreSQL database of the inbox (default: --stores, when that is a postgresql URL)")
    worker.add_argument("--concurrency", type=int, default=4, metavar="N", help="turns of different sessions run at once (default: 4)")
    worker.add_argument("--stall-timeout", type=float, default=30.0, metavar="SECONDS", help="a worker silent this long is taken for dead and its turns run again elsewhere (default: 30)")
    worker.add_argument("--shutdown-grace", type=float, default=30.0, metavar="SECONDS", help="on SIGTERM, how long the turns in flight may take before they are handed back to the inbox (default: 30)")
    worker.add_argument(
        "--idle-end", type=float, metavar="SECONDS",
        help="end (and distil) a session this worker ran turns of once nobody has spoken in it for this long; "
        "needs a pipeline with note-taking (default: sessions are not ended)",
    )
    worker.set_defaults(handler=_worker)

    serve = commands.add_parser(
        "serve", parents=[data, model], help="serve a bot over HTTP: a JSON and streaming API and a chat page",
        description="Serve the bot at http://HOST:PORT: the API under /v1 (its OpenAPI document at /openapi.json), "
        "the chat page at /. Every /v1 request carries a bearer token from --tokens, which says its user and tenant. "
        "SIGTERM or Ctrl-C stops it.",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    serve.add_argument("--tokens", required=True, metavar="FILE", help="the TOML token file: each token's user, org, team and project")
    serve.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="your pipeline instead of the standard one: a factory taking llm, channel and stores by name (or nothing)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port to listen on (default: 8000)")
    serve.add_argument(
        "--inbox", action=argparse.BooleanOptionalAction, default=None,
        help="submit turns to the workers' inbox (run `agentloop worker` beside it) instead of running them here "
        "(default: on for postgresql stores, off otherwise)",
    )
    serve.add_argument("--timeout", type=_seconds, default=120.0, metavar="SECONDS", help="the turn deadline (default: 120)")
    serve.add_argument("--max-body-bytes", type=int, default=65536, metavar="N", help="larger request bodies get 413 (default: 65536)")
    serve.add_argument("--max-message-chars", type=int, default=8000, metavar="N", help="longer messages get 422 (default: 8000)")
    serve.add_argument("--rate-limit", type=float, default=60.0, metavar="PER_MINUTE", help="requests a token may make a minute on average (default: 60)")
    serve.add_argument("--burst", type=int, default=10, metavar="N", help="requests a token may make at once (default: 10)")
    serve.add_argument(
        "--idle-timeout", type=_seconds, default=1800.0, metavar="SECONDS",
        help="a session without a turn this long is ended and distilled (default: 1800)",
    )
    serve.add_argument(
        "--max-concurrent-turns", type=int, default=None, metavar="N",
        help="run at most N turns here at once, the others waiting their turn (default: no bound)",
    )
    serve.add_argument("--otel", action="store_true", help="export traces and metrics with OpenTelemetry, configured by the OTEL_* variables")
    serve.set_defaults(handler=_serve)
    return parser


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from agentloop.serve.command import serve
    except ImportError as error:
        raise CliError(f"serving needs starlette and uvicorn: pip install 'agentloop-ecs[serve]' ({error})") from error
    return serve(args, out)


def _seconds(text: str) -> float:
    """A positive number of seconds, for argparse."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _configure_logging(level: str) -> None:
    try:
        configure_logging(level)
    except ValueError as error:
        raise CliError(str(error)) from error


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status. Logging is configured for the
    command and restored afterwards, so `main` can be called in-process (tests)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    logging_before = structlog.get_config()
    try:
        _configure_logging(args.log_level or getattr(args, "quiet_log_level", "WARNING"))
        return handler(args, out or sys.stdout)
    except (CliError, BotError, StoreError) as error:  # a store failing mid-command is said in one line too
        print(terminal_text(f"agentloop: {error}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentloop: interrupted", file=sys.stderr)
        return 130
    finally:
        structlog.configure(**logging_before)


if __name__ == "__main__":
    sys.exit(main())
