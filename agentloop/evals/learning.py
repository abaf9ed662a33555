"""The learning curve: the same kind of task, session after session, with note-taking on and off.

A learning dataset (YAML) holds task families, each a sequence of sessions of one kind of task.
`run_learning` runs every family's sessions in order twice on fresh stores: with note-taking (each
session ends and is distilled, so later sessions are shown its note) and without (no session is
distilled, so no note is ever shown), and reports each session's success, model and tool calls,
tokens, cost and the notes it was shown. `agentloop eval --learning` runs it from a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO, cast

import attrs
import cattrs

from agentloop.adapters import open_stores
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.bots import ModelSettings, built_pipeline, pipeline_note_taking
from agentloop.components import CallUsage, ToolExecutions, TurnUsage
from agentloop.context import IncomingMessage, Session
from agentloop.errors import AgentloopError
from agentloop.evals.learning_render import report_html, report_png, report_table
from agentloop.loop import AgentLoop
from agentloop.notes import RetrievedNotes
from agentloop.ports import LLM
from agentloop.pricing import ModelPrice, Prices

PipelineFactory = Callable[..., Any]
"""Builds the bot: takes `llm`, `channel` and `stores` by name (or nothing), as `agentloop chat --pipeline` does."""


class LearningDatasetError(ValueError, AgentloopError):
    """A learning dataset that cannot be read: the message says which entry and what to fix."""


class LearningRunError(RuntimeError, AgentloopError):
    """The learning curve cannot be measured with this pipeline (it has no note-taking, say)."""


class PriceSpecError(ValueError, AgentloopError):
    """A `--price` value that does not read as MODEL=INPUT,OUTPUT."""


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise LearningDatasetError(f"{where} must be a string or a list of strings, got {value!r}")


@attrs.frozen
class SuccessCriteria:
    """What counts as success for a session: every part given must hold (none given: any answer)."""

    answer_contains: tuple[str, ...] = ()
    """Texts the session's last answer holds, ignoring case."""
    answer_matches: str | None = None
    """A regular expression the last answer matches (searched, not anchored)."""
    tools_called: tuple[str, ...] = ()
    """Tools the session called, each at least once, in any order."""

    def unmet(self, answer: str, tools: Sequence[str]) -> tuple[str, ...]:
        """The criteria `answer` and the called `tools` fail, each as a sentence; empty on success."""
        missing = [f"the answer does not contain {t!r}" for t in self.answer_contains if t.lower() not in answer.lower()]
        if self.answer_matches is not None and re.search(self.answer_matches, answer) is None:
            missing.append(f"the answer does not match {self.answer_matches!r}")
        missing += [f"{name} was not called" for name in self.tools_called if name not in tools]
        return tuple(missing)

    @classmethod
    def parse(cls, raw: object, where: str) -> SuccessCriteria:
        if not isinstance(raw, dict):
            raise LearningDatasetError(f"{where} must be a mapping of answer_contains, answer_matches, tools_called")
        unknown = set(raw) - {"answer_contains", "answer_matches", "tools_called"}
        if unknown:
            raise LearningDatasetError(f"{where} has unknown keys {sorted(unknown)}; use answer_contains, answer_matches, tools_called")
        pattern = raw.get("answer_matches")
        if pattern is not None:
            try:
                re.compile(str(pattern))
            except re.error as error:
                raise LearningDatasetError(f"{where}.answer_matches is not a regular expression: {error}") from error
        return cls(
            _strings(raw.get("answer_contains", []), f"{where}.answer_contains"),
            None if pattern is None else str(pattern),
            _strings(raw.get("tools_called", []), f"{where}.tools_called"),
        )


@attrs.frozen
class LearningSession:
    """One session of a family: the user's messages, in order, and what counts as its success."""

    messages: tuple[str, ...]
    success: SuccessCriteria = SuccessCriteria()


@attrs.frozen
class TaskFamily:
    """Sessions of the same kind of task, run in order in one project so later ones may see earlier notes."""

    name: str
    sessions: tuple[LearningSession, ...]


@attrs.frozen
class LearningDataset:
    """Task families whose sessions, run in order, should get cheaper with note-taking."""

    name: str
    families: tuple[TaskFamily, ...]
    description: str = ""

    @classmethod
    def from_yaml(cls, text: str, *, name: str = "learning") -> LearningDataset:
        """Parse the YAML format of docs/evals-learning.md; a wrong entry is a `LearningDatasetError`."""
        try:
            import yaml
        except ImportError as error:
            raise ModuleNotFoundError("reading a learning dataset needs PyYAML: pip install 'agentloop-ecs[evals]'", name="yaml") from error
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise LearningDatasetError(f"the learning dataset is not valid YAML: {error}") from error
        if not isinstance(raw, dict) or not isinstance(raw.get("families"), list) or not raw["families"]:
            raise LearningDatasetError("a learning dataset is a mapping with a non-empty list under 'families'")
        families = tuple(_family(entry, f"families[{i}]") for i, entry in enumerate(raw["families"]))
        names = [f.name for f in families]
        if len(set(names)) != len(names):
            raise LearningDatasetError(f"family names must be unique, got {names}")
        return cls(str(raw.get("name", name)), families, str(raw.get("description", "")))

    @classmethod
    def load(cls, path: str | Path) -> LearningDataset:
        """Read a dataset file; it is named after the file unless it says `name:`."""
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except OSError as error:
            raise LearningDatasetError(f"cannot read the learning dataset {str(where)!r}: {error.strerror}") from error
        return cls.from_yaml(text, name=where.stem)


def _family(raw: object, where: str) -> TaskFamily:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("sessions"), list):
        raise LearningDatasetError(f"{where} needs a 'name' and a list of 'sessions'")
    if not raw["sessions"]:
        raise LearningDatasetError(f"{where} ({raw['name']}) has no sessions")
    default = raw.get("success", {})
    sessions = []
    for i, entry in enumerate(raw["sessions"]):
        here = f"{where}.sessions[{i}]"
        entry = {"messages": entry} if isinstance(entry, (str, list)) else entry
        if not isinstance(entry, dict) or "messages" not in entry:
            raise LearningDatasetError(f"{here} needs 'messages': the user's message or a list of them")
        messages = _strings(entry["messages"], f"{here}.messages")
        if not messages:
            raise LearningDatasetError(f"{here}.messages is empty; give the user's message")
        sessions.append(LearningSession(messages, SuccessCriteria.parse(entry.get("success", default), f"{here}.success")))
    return TaskFamily(raw["name"], tuple(sessions))


@attrs.frozen
class SessionRun:
    """What one session did: `index` counts from 1 within its family; `distillation` is the
    status of its note (stored, skipped, duplicate, failed) with note-taking, None without."""

    family: str
    index: int
    note_taking: bool
    success: bool
    llm_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    """Dollars, None when a model call's price is unknown."""
    notes_shown: tuple[str, ...] = ()
    """The titles of the notes the session's turns were shown (`RetrievedNotes`), first seen first."""
    tools: tuple[str, ...] = ()
    answer: str = ""
    unmet: tuple[str, ...] = ()
    distillation: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.frozen
class CurvePoint:
    """One session index of a curve, averaged over the families that have that many sessions."""

    index: int
    sessions: int
    success_rate: float
    llm_calls: float
    tool_calls: float
    tokens: float
    cost: float | None
    notes_shown: float


_converter = cattrs.Converter()


@attrs.frozen
class LearningReport:
    """Every session of both runs; `curve(note_taking=...)` is what the plot draws."""

    dataset: str
    sessions: tuple[SessionRun, ...]

    def runs(self, *, note_taking: bool) -> tuple[SessionRun, ...]:
        return tuple(s for s in self.sessions if s.note_taking is note_taking)

    def curve(self, *, note_taking: bool) -> tuple[CurvePoint, ...]:
        """Per session index, the mean of each measure over the families (cost: None if any is unknown)."""
        runs = self.runs(note_taking=note_taking)
        points = []
        for index in sorted({s.index for s in runs}):
            at = [s for s in runs if s.index == index]
            costs = [s.cost for s in at]
            points.append(CurvePoint(
                index, len(at), sum(s.success for s in at) / len(at),
                sum(s.llm_calls for s in at) / len(at), sum(s.tool_calls for s in at) / len(at),
                sum(s.tokens for s in at) / len(at),
                None if any(c is None for c in costs) else sum(c for c in costs if c is not None) / len(at),
                sum(len(s.notes_shown) for s in at) / len(at),
            ))
        return tuple(points)

    def to_json(self) -> str:
        """The sessions, and both curves for readers that want only those (ignored by `from_json`)."""
        curves = {
            "with_notes": _converter.unstructure(self.curve(note_taking=True)),
            "without_notes": _converter.unstructure(self.curve(note_taking=False)),
        }
        return json.dumps({**_converter.unstructure(self), "curves": curves}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LearningReport:
        raw = json.loads(text)
        return LearningReport(raw["dataset"], _converter.structure(raw["sessions"], tuple[SessionRun, ...]))

    def table(self) -> str:
        """Both curves side by side, one row per session index, then the notes each session was shown, as plain text."""
        return report_table(self)

    def png(self) -> bytes:
        """The two curves (success, model calls, tool calls, tokens per session index) as a PNG."""
        return report_png(self)

    def html(self) -> str:
        """An HTML fragment for a report page: the plot inlined as base64, the table of both curves, each session."""
        return report_html(self)

    def write(self, directory: str | Path) -> tuple[Path, Path, Path]:
        """Write learning.json, learning.png and learning.html (a page holding `html()`) into `directory`."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        paths = (out / "learning.json", out / "learning.png", out / "learning.html")
        paths[0].write_text(self.to_json(), encoding="utf-8")
        paths[1].write_bytes(self.png())
        page = f"<!doctype html>\n<html><head><meta charset='utf-8'><title>Learning curve</title></head>\n<body>\n{self.html()}\n</body></html>\n"
        paths[2].write_text(page, encoding="utf-8")
        return paths


async def run_learning(
    dataset: LearningDataset,
    pipeline: PipelineFactory | str,
    *,
    llm: LLM | Callable[[], LLM] | None = None,
    prices: Prices | None = None,
    org: str = "learning",
    on_session: Callable[[SessionRun], None] | None = None,
) -> LearningReport:
    """Run every family's sessions in order with note-taking, then again without, each run on
    fresh stores in a temporary directory; a family's sessions share the project named after it.

    `pipeline` is a factory (or `module:factory`) taking `llm`, `channel` and `stores` by name;
    its bot must have note-taking (`add_note_taking`), which is closed when its run ends. `llm`,
    when given, is what the factory is offered: a model, or a function making it (called only when
    the factory takes `llm`). `on_session` is told of each session as it ends.
    """
    sessions: list[SessionRun] = []
    for note_taking in (True, False):
        sessions += await _run_all(dataset, pipeline, llm, prices or Prices(), org, on_session, note_taking=note_taking)
    return LearningReport(dataset.name, tuple(sessions))


async def _run_all(
    dataset: LearningDataset, pipeline: PipelineFactory | str, llm: LLM | Callable[[], LLM] | None, prices: Prices, org: str,
    on_session: Callable[[SessionRun], None] | None, *, note_taking: bool,
) -> list[SessionRun]:
    async with AsyncExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-learning-"))
        stores = stack.enter_context(open_stores(directory))
        offered: dict[str, Callable[[], Any]] = {"channel": RecordingChannel, "stores": lambda: stores}
        if llm is not None:
            offered["llm"] = cast("Callable[[], LLM]", llm) if _is_maker(llm) else (lambda: llm)
        loop = stack.enter_context(built_pipeline(pipeline, offered))
        notes = pipeline_note_taking(loop)
        if notes is None:
            raise LearningRunError(
                "the pipeline has no note-taking, so nothing can be learned; add it with "
                "systems.add_note_taking(pipeline, open_note_taking(stores, llm))"
            )
        stack.callback(notes.close)  # drains capture before the stores close
        runs = []
        for family in dataset.families:
            for index, planned in enumerate(family.sessions, start=1):
                session = Session(f"{family.name}-{index}", user_id="learner", project_id=family.name, org_id=org)
                run = await _run_session(loop, session, planned, prices, family.name, index, note_taking=note_taking)
                if note_taking:
                    result = await notes.end_session(session, success=run.success)
                    run = attrs.evolve(run, distillation=result.status.value)
                runs.append(run)
                if on_session is not None:
                    on_session(run)
        return runs


async def _run_session(
    loop: AgentLoop, session: Session, planned: LearningSession, prices: Prices, family: str, index: int, *, note_taking: bool
) -> SessionRun:
    """Run the session's messages as turns and add up what they did."""
    calls: list[CallUsage] = []
    tools: list[str] = []
    shown: list[str] = []
    answer = ""
    for text in planned.messages:
        ctx = await loop.run_turn(session, IncomingMessage(text))
        calls += (ctx.get(TurnUsage) or TurnUsage()).calls
        tools += [e.tool_name for e in (ctx.get(ToolExecutions) or ToolExecutions()).executions]
        shown += [r.item.title for r in (ctx.get(RetrievedNotes) or RetrievedNotes()).notes if r.item.title not in shown]
        outcome = ctx.turn_outcome
        answer = (outcome.assistant_text if outcome is not None else None) or ""
    costs = [prices.cost(c.model, c.usage) for c in calls]
    unmet = planned.success.unmet(answer, tools)
    return SessionRun(
        family, index, note_taking, not unmet, len(calls), len(tools),
        sum(c.usage.input_tokens for c in calls), sum(c.usage.output_tokens for c in calls),
        None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
        tuple(shown), tuple(tools), answer, unmet,
    )


def _is_maker(llm: LLM | Callable[[], LLM]) -> bool:
    """True for a function making the model rather than the model (a model has `complete`)."""
    return callable(llm) and not hasattr(llm, "complete")


def parse_price(text: str) -> tuple[str, ModelPrice]:
    """`MODEL=INPUT,OUTPUT` (dollars per million tokens) as the model and its price; what `--price` gives."""
    model, _, rates = text.rpartition("=")
    try:
        if not model:
            raise ValueError("no model named")
        given, taken = rates.split(",")
        return model, ModelPrice(float(given), float(taken))
    except ValueError as error:
        raise PriceSpecError(f"--price {text!r}: expected MODEL=INPUT,OUTPUT in dollars per million tokens, as in gpt-4o=2.50,10.00") from error


def learning_command(args: argparse.Namespace, out: TextIO, progress: TextIO) -> int:
    """Run the learning dataset `args` name (as `agentloop eval --learning` parses them): a line on `progress`
    per session, both curves on `out`, the report files in `args.out`; 1 with one line on `progress` on an error."""
    def told(run: SessionRun) -> None:
        arm = "with notes" if run.note_taking else "without notes"
        outcome = "success" if run.success else "failure"
        progress.write(f"{run.family} {run.index} {arm}: {outcome}, {run.llm_calls} LLM calls, {run.tool_calls} tool calls\n")

    try:
        dataset = LearningDataset.load(args.dataset)
        llm = None if args.model is None else functools.cache(ModelSettings(args.model, args.provider, args.base_url).llm)
        prices = Prices(dict(args.price))
        report = asyncio.run(run_learning(dataset, args.pipeline, llm=llm, prices=prices, on_session=told))
        paths = report.write(args.out)
    except (AgentloopError, OSError) as error:
        progress.write(f"error: {error}\n")
        return 1
    out.write(report.table() + "\n" + "".join(f"wrote {path}\n" for path in paths))
    return 0
