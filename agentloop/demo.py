"""`agentloop demo`: a complete bot run offline, with every step it shows checked.

A travel helper with three real tools runs on a scripted model (no network, no key)
through three sessions: tools are used, the model is rate limited once and the user
still gets an answer, the next turn recovers from a tool error, the first session
ends successfully and is distilled into a note, a short session is not, and a later
related question gets that note in its prompt. The `agentloop demo` command hands in
how to open a bot (`agentloop.bots.open_bot`), so this module never imports `systems`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TextIO

import attrs

from agentloop.adapters.urls import shown_url
from agentloop.components import ToolExecution, ToolExecutions
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import DemoCheckError, LlmCallError
from agentloop.loop import AgentLoop
from agentloop.notes import DistillationResult, DistillationStatus, NoteTaking, RetrievedNotes
from agentloop.outcome import FailureKind, FailureSource, FinishReason, TurnOutcome
from agentloop.ports import LLM, Channel, Clock
from agentloop.ports.clock import FakeClock
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.adapters.llm.scripted import ScriptedLLM, ScriptStep
from agentloop.tools import Tool, tool

SCRIPTED_LABEL = "scripted model — no network, no API key"


class DemoBot(Protocol):
    """What the demo needs of an open bot."""

    @property
    def loop(self) -> AgentLoop: ...

    @property
    def note_taking(self) -> NoteTaking: ...


class BotFactory(Protocol):
    """Opens the standard bot with note-taking on the stores at a URL or data directory (`agentloop.bots.open_bot`)."""

    def __call__(
        self, stores: str | os.PathLike[str], llm: LLM, channel: Channel, *, tools: Iterable[Tool], clock: Clock
    ) -> AbstractContextManager[DemoBot]: ...


@attrs.frozen
class Expect:
    """What one turn must do for the demo to pass."""

    finish: FinishReason
    tools: tuple[str, ...] = ()
    failures: tuple[tuple[FailureSource, FailureKind], ...] = ()
    fallback: bool = False
    notes_offered: bool = False


@attrs.frozen
class DemoTurn:
    text: str
    model: tuple[ScriptStep, ...]
    """What the scripted model answers during this turn, in order."""
    expect: Expect
    think_s: float = 10.0
    """Simulated seconds the user takes before sending the message."""


@attrs.frozen
class DemoSession:
    session: Session
    title: str
    turns: tuple[DemoTurn, ...]
    distillation: DistillationStatus
    """What ending the session successfully must do with its trajectory."""
    note_reply: str | None = None
    """The scripted model's note, when the session is long enough to be distilled."""
    feedback: bool = False
    """Give positive feedback at the end, crediting the notes the session was shown."""


RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85}
FORECASTS = {"lisbon": ("sunny", 24), "porto": ("showers", 17)}


def demo_tools(clock: FakeClock) -> list[Tool]:
    """The travel helper's tools; each takes simulated time, as a real API call would."""

    @tool
    def weather(city: str) -> str:
        """The weekend forecast for a city."""
        clock.advance(12)
        sky, celsius = FORECASTS.get(city.lower(), ("cloudy", 15))
        return f"{city}: {sky}, {celsius}°C"

    @tool
    def convert_currency(amount: float, from_code: str, to_code: str) -> str:
        """Convert an amount between currencies given by ISO code (EUR, USD, GBP)."""
        clock.advance(8)
        for code in (from_code, to_code):
            if code not in RATES:
                raise ValueError(f"unknown currency {code!r}; use one of {', '.join(RATES)}")
        return f"{amount:.2f} {from_code} = {amount / RATES[from_code] * RATES[to_code]:.2f} {to_code}"

    @tool
    def packing_list(celsius: int) -> str:
        """What to pack for a weekend at this temperature."""
        clock.advance(15)
        layers = "t-shirts, sunglasses, sunscreen" if celsius >= 20 else "a rain jacket, a warm layer"
        return f"passport, charger, comfortable shoes, {layers}"

    return [weather, convert_currency, packing_list]


NOTE = """## Context
Planning a weekend city trip: weather, money and packing

## Solution
Check the weekend weather for the city first, then convert the budget into the local
currency with ISO codes, then build the packing list from the forecast temperature.

## Key Patterns
- weather -> convert_currency -> packing_list, in that order
- a currency name that is not an ISO code fails; retry with EUR, USD or GBP

## Code Examples
None

## Tags
travel, weekend trip, weather, currency, packing
"""

call = ScriptedLLM.tool_call
ADA = "ada"


def _lisbon_turns() -> tuple[DemoTurn, ...]:
    """The first session's turns: a tool call, a rate-limited model, a failing tool argument, another tool."""
    return (
        DemoTurn(
            "What's the weather in Lisbon this weekend?",
            (call("weather", {"city": "Lisbon"}), "Sunny and about 24°C in Lisbon this weekend."),
            Expect(FinishReason.SUCCESS, tools=("weather",)),
        ),
        DemoTurn(
            "How much is 200 euros in dollars?",
            (LlmCallError("the model server is rate limiting requests (HTTP 429)", kind=FailureKind.RATE_LIMIT),),
            Expect(FinishReason.ERROR, failures=((FailureSource.LLM, FailureKind.RATE_LIMIT),), fallback=True),
        ),
        DemoTurn(
            "Trying again: 200 euros in dollars?",
            (
                call("convert_currency", {"amount": 200, "from_code": "EUR", "to_code": "DOLLARS"}),
                call("convert_currency", {"amount": 200, "from_code": "EUR", "to_code": "USD"}),
                "200 euros is about 216 US dollars.",
            ),
            Expect(
                FinishReason.SUCCESS,
                tools=("convert_currency", "convert_currency"),
                failures=((FailureSource.TOOL, FailureKind.EXCEPTION),),
            ),
        ),
        DemoTurn(
            "And what should I pack?",
            (call("packing_list", {"celsius": 24}), "Pack light: t-shirts, sunglasses, sunscreen and good shoes."),
            Expect(FinishReason.SUCCESS, tools=("packing_list",)),
        ),
    )


def story() -> tuple[DemoSession, ...]:
    """The demo's sessions: what the user says, what the scripted model answers, what must happen."""
    lisbon = Session("lisbon-weekend", user_id=ADA, project_id="travel")
    return (
        DemoSession(
            lisbon,
            "planning a weekend in Lisbon",
            _lisbon_turns(),
            DistillationStatus.STORED,
            note_reply=NOTE,
        ),
        DemoSession(
            Session("quick-question", user_id=ADA, project_id="travel"),
            "a quick question",
            (DemoTurn("Which time zone is Lisbon in?", ("Lisbon is on Western European Time.",), Expect(FinishReason.SUCCESS)),),
            DistillationStatus.SKIPPED,
        ),
        DemoSession(
            Session("porto-weekend", user_id=ADA, project_id="travel"),
            "a related question, weeks later",
            (
                DemoTurn(
                    "Planning a weekend trip to Porto: what should I check for weather, money and packing?",
                    (
                        call("weather", {"city": "Porto"}),
                        "As last time: showers and 17°C in Porto, so pack a rain jacket; euros are the local currency.",
                    ),
                    Expect(FinishReason.SUCCESS, tools=("weather",), notes_offered=True),
                ),
            ),
            DistillationStatus.SKIPPED,
            feedback=True,
        ),
    )


def model_script(sessions: Sequence[DemoSession]) -> list[ScriptStep]:
    """Every scripted model answer in the order the bot will ask for them."""
    steps: list[ScriptStep] = []
    for demo in sessions:
        for turn in demo.turns:
            steps.extend(turn.model)
        if demo.note_reply is not None:
            steps.append(demo.note_reply)
    return steps


class _Run:
    """One run of the story: prints each step on `out`, progress on `progress`, checks each."""

    def __init__(self, bot: DemoBot, llm: ScriptedLLM, channel: RecordingChannel, clock: FakeClock,
                 out: TextIO, progress: TextIO, total: int) -> None:
        self.bot, self.llm, self.channel, self.clock = bot, llm, channel, clock
        self.out, self.progress = out, progress
        self.step, self.total, self.checks = 0, total, 0
        self.executions: list[ToolExecution] = []
        """The tool executions of the current session."""

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    def begin(self, label: str) -> str:
        self.step += 1
        print(f"[{self.step}/{self.total}] {label}", file=self.progress, flush=True)
        return f"step {self.step} ({label})"

    def check(self, where: str, held: bool, expected: str, got: Any) -> None:
        self.checks += 1
        if not held:
            raise self.misbehaved(where, expected, got)

    @staticmethod
    def misbehaved(where: str, expected: str, got: Any) -> DemoCheckError:
        return DemoCheckError(f"{where} misbehaved: expected {expected}, got {got}")

    async def turn(self, session: Session, turn: DemoTurn) -> None:
        where = self.begin(f"{session.id}: {turn.text}")
        self.clock.advance(turn.think_s)
        asked, delivered = len(self.llm.requests), len(self.channel.texts)
        ctx = await self.bot.loop.run_turn(session, IncomingMessage(turn.text))
        outcome = ctx.turn_outcome
        self.say(f"you> {turn.text}")
        executions = ctx.get(ToolExecutions)
        self.executions.extend(executions.executions if executions else ())
        for execution in executions.executions if executions else ():
            arguments = ", ".join(f"{k}={v!r}" for k, v in execution.arguments.items())
            result = execution.result if execution.error is None else f"error: {execution.error}"
            self.say(f"  tool {execution.tool_name}({arguments}) -> {result}")
        offered = ctx.get(RetrievedNotes)
        for retrieved in offered.notes if offered else ():
            self.say(f"  note offered: #{retrieved.item.id} {retrieved.item.title!r} (similarity {retrieved.similarity:.2f})")
        if outcome is None:
            raise self.misbehaved(where, "a TurnOutcome", "none")
        reply = self.channel.texts[delivered:]
        self.say(f"bot> {' / '.join(reply)}")
        self.say(f"  finish: {outcome.finish_reason.value}" + ("  (fallback answer)" if outcome.fallback else ""))
        for failure in ctx.failures:
            self.say(f"  failure: {failure.source.value} {failure.component} {failure.kind.value}: {failure.message}")
        self._expectations(where, turn.expect, ctx, outcome, reply, asked)

    def _expectations(
        self, where: str, expect: Expect, ctx: AgentContext, outcome: TurnOutcome, reply: list[str], asked: int
    ) -> None:
        executions = ctx.get(ToolExecutions)
        tools = tuple(e.tool_name for e in executions.executions) if executions else ()
        failures = tuple((f.source, f.kind) for f in ctx.failures)
        text = outcome.outgoing_response.text if outcome.outgoing_response else None
        self.check(where, outcome.finish_reason is expect.finish, f"finish {expect.finish.value}", outcome.finish_reason.value)
        self.check(where, tools == expect.tools, f"tool calls {list(expect.tools)}", list(tools))
        self.check(where, failures == expect.failures, f"failures {_kinds(expect.failures)}", _kinds(failures))
        self.check(where, outcome.fallback is expect.fallback, f"fallback={expect.fallback}", f"fallback={outcome.fallback}")
        self.check(where, reply == [text] and bool(text), "the answer delivered to the user exactly once", reply)
        if expect.notes_offered:
            offered = ctx.get(RetrievedNotes)
            titles = [r.item.title for r in offered.notes] if offered else []
            self.check(where, bool(titles), "a note from an earlier session offered", "no note")
            lines = "\n".join(m.content or "" for m in self.llm.requests[asked].messages).splitlines()
            at = next((i for i, line in enumerate(lines) if line == f"### {titles[0]}"), None)
            if at is None:
                raise self.misbehaved(where, f"the note {titles[0]!r} in the model's prompt", "a prompt without it")
            self.say("  the model's prompt carried it:")
            excerpt = "\n".join(f"    | {line}" for line in lines[max(0, at - 1) : at + 4] if line.strip())
            self.say(excerpt)

    async def end(self, demo: DemoSession) -> DistillationResult:
        where = self.begin(f"end of {demo.session.id}")
        result = await self.bot.note_taking.end_session(demo.session, success=True)
        calls, span = len(self.executions), _span_s(self.executions)
        self.executions = []
        self.say(f"== end of session {demo.session.id}: success, {calls} tool call(s) over {span:.0f} s of simulated time")
        self.say(f"  distillation: {result.status.value} ({result.reason})")
        if demo.distillation is DistillationStatus.STORED:
            self.check(where, calls >= 3 and span > 30, "at least 3 tool calls over more than 30 s", f"{calls} over {span:.0f} s")
        if result.note is not None:
            self.say(f"  note #{result.note.id} stored as {result.note.status.value}: {result.note.title!r}")
        self.check(where, result.status is demo.distillation, f"distillation {demo.distillation.value}", result.status.value)
        if demo.feedback:
            credited = await self.bot.note_taking.record_feedback(demo.session, positive=True)
            for item in credited:
                self.say(f"  positive feedback credited note #{item.id} (useful {item.usefulness_score}x in {item.retrieval_count} retrieval(s))")
            self.check(where, bool(credited), "feedback crediting the note the session was shown", "nothing credited")
        return result


def _span_s(executions: Sequence[ToolExecution]) -> float:
    """Seconds from the first tool call's start to the last one's end."""
    if not executions:
        return 0.0
    end = max(e.started_at.timestamp() + e.duration_ms / 1000 for e in executions)
    return end - min(e.started_at.timestamp() for e in executions)


def _kinds(failures: Iterable[tuple[FailureSource, FailureKind]]) -> list[str]:
    return [f"{source.value}/{kind.value}" for source, kind in failures]


async def run_demo(
    open_bot: BotFactory, stores: str | os.PathLike[str], *, out: TextIO, progress: TextIO, temporary: bool = False
) -> int:
    """Run the story on a bot opened on the stores at `stores` (a URL or a data directory);
    returns the number of checks that held.

    Raises `DemoCheckError` naming the first step that misbehaved.
    """
    sessions = story()
    clock = FakeClock()
    llm = ScriptedLLM(model_script(sessions), model="scripted-demo")
    channel = RecordingChannel()
    total = sum(len(s.turns) + 1 for s in sessions)
    print(f"agentloop demo: a travel helper on a {SCRIPTED_LABEL}", file=out)
    print(f"data: {shown_url(os.fspath(stores))}" + (" (temporary; keep it with --data-dir DIR)" if temporary else ""), file=out)
    with open_bot(stores, llm, channel, tools=demo_tools(clock), clock=clock) as bot:
        run = _Run(bot, llm, channel, clock, out, progress, total)
        notes: list[DistillationResult] = []
        for demo in sessions:
            run.say(f"\n== session {demo.session.id}: {demo.title} (user {demo.session.user_id}, project {demo.session.project_id})")
            for turn in demo.turns:
                await run.turn(demo.session, turn)
            notes.append(await run.end(demo))
        run.check("the end of the story", llm.remaining == 0, "every scripted answer used", f"{llm.remaining} unused")
        run.say("\n== notes the bot keeps")
        for result in notes:
            if result.note is not None:
                note = await bot.note_taking.knowledge.get(result.note.key)
                run.say(f"#{note.id} [{note.status.value}] {note.title} — retrieved {note.retrieval_count}x, "
                        f"useful {note.usefulness_score}x")
                run.say("\n".join(f"    {line}" for line in note.markdown.strip().splitlines()))
    print(f"\ndemo ok: {run.checks} checks held over {run.step} steps", file=out)
    return run.checks


