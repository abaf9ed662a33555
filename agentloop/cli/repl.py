"""The chat REPL: one turn per line at the console, a spinner while the model thinks, and the
slash commands (/good, /bad, /approve, /deny, /bye)."""

from __future__ import annotations

import asyncio
import codecs
import io
import itertools
import os
import signal
import sys
import threading
from typing import TextIO

import attrs

from agentloop.context import IncomingMessage, Session
from agentloop.errors import TurnInProgressError
from agentloop.loop import AgentLoop
from agentloop.notes import NoteTaking
from agentloop.ports import ApprovalStore
from agentloop.scopes import approval_scope
from agentloop.terminal import terminal_line

SPINNER_FRAMES = "|/-\\"


class Spinner:
    """A sign of life on a terminal while the model has not answered: frames on `stream`,
    started with a turn and wiped by `stop` (before the first token is printed). Log lines
    written with `write_above` clear its line first and it is drawn again below them."""

    def __init__(self, stream: TextIO, *, interval: float = 0.1) -> None:
        self.stream = stream
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._shown: str | None = None
        """The frame on the terminal's last line, None when the spinner is off."""
        self._mid_line = False
        """Whether log text has begun a line it has not ended: the spinner waits for its end."""
        self._lock = threading.Lock()  # log lines may come from other threads than the spinner's

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._spin())

    async def _spin(self) -> None:
        for frame in itertools.cycle(SPINNER_FRAMES):
            with self._lock:
                self._shown = f"\r{frame} waiting for the model"
                if not self._mid_line:
                    self.stream.write(self._shown)
                    self.stream.flush()
            await asyncio.sleep(self.interval)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            with self._lock:
                self._shown = None
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def write_above(self, text: str) -> int:
        """Write log `text` on the terminal: on a line of its own, the spinner drawn again once the line ends."""
        with self._lock:
            if self._shown is not None and not self._mid_line and text:
                self.stream.write("\r\x1b[K")
            self.stream.write(text)
            if text:
                self._mid_line = not text.endswith("\n")
            if self._shown is not None and not self._mid_line:
                self.stream.write(self._shown)
            self.stream.flush()
        return len(text)


class LogAboveSpinner(io.TextIOBase):
    """The stream a chat's log lines go to while it may show a spinner: each line above it."""

    def __init__(self, spinner: Spinner) -> None:
        self.spinner = spinner

    def write(self, text: str) -> int:
        return self.spinner.write_above(text)

    def flush(self) -> None:
        self.spinner.stream.flush()


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
    running: int = 0
    """Turns started and not ended: when one ends, the spinner turns again for the next."""


def converse(chat: Chat, lines: TextIO) -> int:
    """One turn per non-empty line until end of input, /quit, /bye or Ctrl-C; then the session
    ends (and is distilled; after /bye, always said on stderr). Returns the exit status: 130
    after Ctrl-C at the prompt, else 0. `/approve` and `/deny [note]` answer the session's
    oldest tool call awaiting approval.

    At a terminal a line typed while a turn runs is sent at once, and the loop's mid-turn
    policy decides what it gets (`_Typing`); other input waits for each turn to end. Ctrl-C
    at the prompt stops at once; Ctrl-C during a turn cancels it and the prompt comes back.
    """
    interactive = lines.isatty()
    if interactive and sys.platform != "win32":  # a terminal's input is watched by the event loop there
        with asyncio.Runner() as runner:
            try:
                return runner.run(_Typing(chat, lines).run())
            finally:
                runner.run(_leave(chat, report=True))
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
                if not line or text in _QUITS:
                    if not line and interactive:
                        print(file=sys.stderr)
                    report = report or text == "/bye"
                    break
                if text:
                    try:
                        runner.run(_command(chat, text))
                    except KeyboardInterrupt:
                        print("\nagentloop: turn cancelled", file=sys.stderr)
        finally:
            runner.run(_leave(chat, report=report))
    return status


_QUITS = ("/quit", "/exit", "/bye")


class _Typing:
    """A chat at a terminal: the event loop watches standard input, so a line typed while a
    turn runs is sent at once and the loop's mid-turn policy decides what it gets. The prompt
    shows when no turn runs; Ctrl-C cancels the running turns, or at the prompt ends the chat."""

    def __init__(self, chat: Chat, lines: TextIO) -> None:
        self.chat = chat
        self.fd = lines.fileno()
        self.decoder = codecs.getincrementaldecoder(lines.encoding or "utf-8")(errors="replace")
        self.partial = ""
        """What was typed of a line not yet ended."""
        self.typed: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        """Lines typed, then None at end of input; KeyboardInterrupt for Ctrl-C at the prompt, or a command's failure."""
        self.commands: set[asyncio.Task[None]] = set()
        self.leaving = False

    async def run(self) -> int:
        """Serve the typed lines until the chat ends; returns its exit status."""
        loop = asyncio.get_running_loop()
        loop.add_reader(self.fd, self._read)
        loop.add_signal_handler(signal.SIGINT, self._ctrl_c)
        try:
            return await self._serve()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_reader(self.fd)

    async def _serve(self) -> int:
        self._prompt()
        while True:
            line = await self.typed.get()
            if isinstance(line, KeyboardInterrupt):
                print(file=sys.stderr)
                return 130
            if isinstance(line, BaseException):
                raise line
            text = (line or "").strip()
            if line is None or text in _QUITS:
                if line is None and not self.commands:  # Ctrl-D at the prompt: the session's last line on a line of its own
                    print(file=sys.stderr)
                break
            if text:
                task = asyncio.get_running_loop().create_task(_command(self.chat, text))
                self.commands.add(task)
                task.add_done_callback(self._ended)
            else:
                self._prompt()
        self.leaving = True  # the running turns end first
        running = set(self.commands)
        if running:
            await asyncio.wait(running)
        failed = [error for task in running if not task.cancelled() and (error := task.exception()) is not None]
        if failed:
            raise failed[0]
        return 0

    def _read(self) -> None:
        """Standard input is readable: queue each line it ends, and None at its end."""
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # the terminal went away
            data = b""
        if data:
            *lines, self.partial = (self.partial + self.decoder.decode(data)).split("\n")
            for line in lines:
                self.typed.put_nowait(f"{line}\n")
            return
        asyncio.get_running_loop().remove_reader(self.fd)
        rest = self.partial + self.decoder.decode(b"", final=True)
        if rest:
            self.typed.put_nowait(rest)
        self.typed.put_nowait(None)

    def _ctrl_c(self) -> None:
        if not self.commands:
            self.typed.put_nowait(KeyboardInterrupt())
        for task in self.commands:
            task.cancel()

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.commands.discard(task)
        if task.cancelled():
            if not self.commands:  # Ctrl-C cancels them all: one line once the last has ended
                print("\nagentloop: turn cancelled", file=sys.stderr)
        elif (error := task.exception()) is not None:
            self.typed.put_nowait(error)
            return
        self._prompt()

    def _prompt(self) -> None:
        if not self.commands and not self.leaving:
            print("you> ", end="", file=sys.stderr, flush=True)


async def _command(chat: Chat, text: str) -> None:
    """What one non-empty line asks: a rating, an answer to a tool call awaiting approval, or a turn."""
    command, _, note = text.partition(" ")
    if text in ("/good", "/bad"):
        await _feedback(chat, positive=text == "/good")
    elif command in ("/approve", "/deny"):
        await _decide(chat, approved=command == "/approve", note=note.strip() or None)
    else:
        await _turn(chat, IncomingMessage(text))


async def _turn(chat: Chat, incoming: IncomingMessage) -> None:
    """Run one turn, the spinner turning until an answer starts (a turn waiting behind another
    gets it when that one ends; a refused one leaves it alone); failures go to stderr."""
    chat.running += 1
    if chat.spinner is not None and chat.running == 1:
        chat.spinner.start()
    refused = False
    try:
        ctx = await chat.loop.run_turn(chat.session, incoming)
    except TurnInProgressError:
        refused = True
        print("agentloop: a turn of this session is still running, so this message was not sent (--mid-turn reject); "
              "send it again once the answer is in", file=sys.stderr)
        return
    finally:
        chat.running -= 1
        if chat.spinner is not None and not (refused and chat.running):
            chat.spinner.stop()
            current = asyncio.current_task()
            if chat.running and not (current is not None and current.cancelling()):  # Ctrl-C cancels the others too
                chat.spinner.start()
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
