"""ToolLoopSystem: limits, policy, plan mode, tool failures, execution records, the capture hook and streaming."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter

import attrs
import pytest

from agentloop import (
    Attachment,
    ChatMessage,
    FailureKind,
    FailureSource,
    Finished,
    FinishReason,
    IncomingMessage,
    LlmCallError,
    LlmFailure,
    LlmReply,
    LlmResponse,
    PlanProposal,
    PromptContext,
    Role,
    SanitizedInput,
    Session,
    StreamedText,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolExecution,
    ToolExecutions,
    ToolLoopStop,
    Tool,
    Usage,
    tool,
)
from agentloop.adapters import InMemoryMetrics, open_stores
from agentloop.context import AgentContext
from agentloop.notes import TrajectoryRecorder
from agentloop.adapters.llm.fallback import FallbackLLM
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM, make_context, run_system_sync
from systems import StandardOptions, ToolLoopSettings, ToolLoopSystem, standard_pipeline


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@tool
def fail() -> str:
    """Always raises."""
    raise ValueError("no luck")


def context(text: str = "what is 1+2?", metadata: dict[str, str] | None = None, clock: FakeClock | None = None,
            timeout: float | None = None, auto_mode: bool = False) -> AgentContext:
    prompt = PromptContext("be exact", (ChatMessage.user(text),))
    return make_context(
        incoming=IncomingMessage(text, metadata=metadata or {}, auto_mode=auto_mode),
        session=Session("s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1"),
        components=[prompt, SanitizedInput(text)],
        clock=clock or FakeClock(),
        timeout=timeout,
    )


def test_tool_results_go_back_to_the_model_and_executions_are_recorded() -> None:
    captured: list[ToolExecution] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), ScriptedLLM.tool_call("add", {"a": 3, "b": 3}),
                       "1+2 is 3"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [add], ToolLoopSettings(on_tool_execution=captured.append)), ctx)
    assert ctx.require(LlmResponse).text == "1+2 is 3"
    last_request = llm.requests[-1]
    assert [m.content for m in last_request.messages if m.role is Role.TOOL] == ["3", "6"]
    assert last_request.messages[0] == ChatMessage.system("be exact")
    assert {s.name for s in last_request.tools} == {"add", "send_voice"}
    executions = ctx.require(ToolExecutions).executions
    assert list(executions) == captured
    first, second = executions
    assert first.id != second.id
    assert (first.tool_name, first.arguments, first.result, first.error) == ("add", {"a": 1, "b": 2}, "3", None)
    assert (first.session_id, first.user_id, first.project_id) == ("s1", "u1", "p1")
    assert (first.org_id, first.team_id) == ("o1", "t1")
    assert first.started_at == datetime(2026, 1, 1, tzinfo=UTC) and first.duration_ms >= 0
    assert first.context_snapshot == {"turn_id": ctx.turn_id, "user_message": "what is 1+2?"}
    assert ctx.failures == ()


def test_failing_unknown_and_badly_called_tools_are_tool_failures_told_to_the_model() -> None:
    llm = ScriptedLLM([
        LlmReply(tool_calls=(ToolCall("1", "fail", {}), ToolCall("2", "nope", {}), ToolCall("3", "add", {"a": "x"}))),
        "sorry",
    ])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [add, fail]), ctx)
    told = [m.content or "" for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told[0] == "error: ValueError: no luck"
    assert told[1].startswith("error: there is no tool named 'nope'")
    assert told[2].startswith("error: tool 'add': a: input should be a valid integer")
    assert [(f.source, f.component, f.kind) for f in ctx.failures] == [
        (FailureSource.TOOL, "fail", FailureKind.EXCEPTION), (FailureSource.TOOL, "nope", FailureKind.VALIDATION),
        (FailureSource.TOOL, "add", FailureKind.VALIDATION)]
    assert [e.succeeded for e in ctx.require(ToolExecutions).executions] == [False, False, False]
    assert ctx.require(LlmResponse).text == "sorry"


class Escape(BaseException):
    """A custom BaseException subclass, which `except Exception` would let by."""


@tool(name="report")
def argparse_report(options: str) -> str:
    """Run the report script with command-line options."""
    parser = argparse.ArgumentParser(prog="report")
    parser.add_argument("--days", type=int, required=True)
    return f"{parser.parse_args(options.split()).days} days"


@tool(name="report")
async def misused_generator_exit(options: str) -> str:
    """Run the report, ending it with GeneratorExit as if it were a generator."""
    await asyncio.sleep(0)
    raise GeneratorExit("not a generator")


@tool(name="report")
def escaping_report(options: str) -> str:
    """Run the report, which raises a BaseException of its own."""
    raise Escape("out of here")


@pytest.mark.parametrize(("report", "error"), [
    (argparse_report, "error: SystemExit: 2"),
    (misused_generator_exit, "error: GeneratorExit: not a generator"),
    (escaping_report, "error: Escape: out of here"),
])
def test_a_tool_raising_system_exit_or_another_base_exception_fails_alone_and_the_model_is_told(
    report: Tool, error: str
) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("report", {"options": "--weeks 3"}), "the report could not run"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [report]), ctx)
    told = [m.content for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told == [error]
    assert [(f.source, f.component, f.kind, f.message) for f in ctx.failures] == [
        (FailureSource.TOOL, "report", FailureKind.EXCEPTION, error.removeprefix("error: "))]
    assert ctx.require(LlmResponse).text == "the report could not run"


def test_keyboard_interrupt_from_a_tool_still_stops_the_turn() -> None:
    @tool
    def interrupted() -> str:
        """Be interrupted by the user."""
        raise KeyboardInterrupt

    llm = ScriptedLLM([ScriptedLLM.tool_call("interrupted", {}), "unused"])
    with pytest.raises(KeyboardInterrupt):
        run_system_sync(ToolLoopSystem(llm, [interrupted]), context())
    assert len(llm.requests) == 1


def test_a_blocking_sync_tool_runs_on_a_thread_so_the_turn_deadline_ends_the_turn_while_it_still_blocks(
    tmp_path: Path,
) -> None:
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    ticks: list[int] = []

    @tool
    def blocking() -> str:
        """Block the calling thread until released."""
        entered.set()
        release.wait(10)
        returned.set()
        return "finally"

    @tool
    async def ticking() -> str:
        """Count event-loop passes while the blocking tool runs."""
        while not entered.is_set():
            await asyncio.sleep(0.01)
        while not returned.is_set() and len(ticks) < 20:
            ticks.append(len(ticks))
            await asyncio.sleep(0.01)
        return "ticked"

    llm = ScriptedLLM([LlmReply(tool_calls=(ToolCall("1", "blocking"), ToolCall("2", "ticking"))), "unused"])
    options = StandardOptions(turn_timeout=1.0)
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[blocking, ticking], options=options) as pipeline:
        ctx = pipeline.build().run_turn_sync(Session("s1", user_id="u1"), IncomingMessage("go"))
    still_blocked = not returned.is_set()
    release.set()
    assert entered.is_set() and still_blocked, "the turn waited for the blocking tool"
    assert len(ticks) == 20, "the event loop stood still while the sync tool blocked"
    assert ctx.turn_outcome is not None and ctx.turn_outcome.finish_reason is FinishReason.DEADLINE
    executions = ctx.require(ToolExecutions).executions
    assert [(e.tool_name, e.result) for e in executions] == [("ticking", "ticked")]


def test_async_tools_of_one_step_run_concurrently_and_report_in_call_order() -> None:
    spans: dict[str, tuple[float, float]] = {}
    order: list[str] = []

    @tool
    async def slow(name: str, seconds: float) -> str:
        """Wait, then answer with the name."""
        start = perf_counter()
        await asyncio.sleep(seconds)
        spans[name] = (start, perf_counter())
        return f"{name} done"

    @tool
    def note(name: str) -> str:
        """Note a name, synchronously."""
        order.append(name)
        return f"{name} noted"

    calls = (ToolCall("1", "slow", {"name": "first", "seconds": 0.25}), ToolCall("2", "note", {"name": "a"}),
             ToolCall("3", "slow", {"name": "second", "seconds": 0.2}), ToolCall("4", "note", {"name": "b"}))
    llm = ScriptedLLM([LlmReply(tool_calls=calls), "all done"])
    ctx = context()
    started = perf_counter()
    run_system_sync(ToolLoopSystem(llm, [slow, note]), ctx)
    elapsed = perf_counter() - started
    assert spans["second"][0] < spans["first"][1], "the second async tool started before the first finished"
    assert elapsed < 0.4, f"two async tools of 250 and 200 ms took {elapsed:.3f} s: they ran one after the other"
    assert order == ["a", "b"]
    told = [(m.tool_call_id, m.content) for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told == [("1", "first done"), ("2", "a noted"), ("3", "second done"), ("4", "b noted")]
    executions = ctx.require(ToolExecutions).executions
    assert [e.arguments.get("name") for e in executions] == ["first", "a", "second", "b"]
    assert len({e.step_id for e in executions}) == 1 and ctx.require(LlmResponse).text == "all done"


def test_a_tool_result_json_cannot_hold_is_that_tools_failure_and_its_siblings_still_finish() -> None:
    finished: list[str] = []

    @tool
    async def slow() -> str:
        """Wait a little, then answer."""
        await asyncio.sleep(0.05)
        finished.append("slow")
        return "slow done"

    @tool
    def pairs() -> dict[tuple[int, int], str]:
        """Answer with a mapping keyed by pairs, which JSON cannot hold."""
        return {(1, 2): "a pair"}

    llm = ScriptedLLM([LlmReply(tool_calls=(ToolCall("1", "slow"), ToolCall("2", "pairs"))), "done anyway"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [slow, pairs]), ctx)
    assert finished == ["slow"], "the sibling was cancelled"
    told = [(m.tool_call_id, m.content or "") for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told[0] == ("1", "slow done") and told[1][0] == "2" and told[1][1].startswith("error: TypeError")
    assert [(f.source, f.component, f.kind) for f in ctx.failures] == [(FailureSource.TOOL, "pairs", FailureKind.EXCEPTION)]
    assert ctx.require(LlmResponse).text == "done anyway"


def test_the_tools_that_finished_before_the_turn_deadline_cut_their_step_short_stay_on_the_turn(tmp_path: Path) -> None:
    @tool
    async def quick(name: str) -> str:
        """Answer at once."""
        return f"{name} done"

    @tool
    async def stuck() -> str:
        """Never answer in time."""
        await asyncio.sleep(5)
        return "too late"

    calls = (ToolCall("1", "quick", {"name": "a"}), ToolCall("2", "stuck"), ToolCall("3", "quick", {"name": "b"}))
    llm = ScriptedLLM([LlmReply(tool_calls=calls), "unused"])
    options = StandardOptions(turn_timeout=0.3)
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[quick, stuck], options=options) as pipeline:
        ctx = pipeline.build().run_turn_sync(Session("s1", user_id="u1"), IncomingMessage("go"))
    executions = ctx.require(ToolExecutions).executions
    assert [(e.arguments, e.result) for e in executions] == [({"name": "a"}, "a done"), ({"name": "b"}, "b done")]


def test_a_step_over_the_tool_limit_runs_only_the_calls_within_it() -> None:
    ran: list[int] = []

    @tool
    async def count(n: int) -> str:
        """Count."""
        ran.append(n)
        return str(n)

    llm = ScriptedLLM([LlmReply(tool_calls=tuple(ToolCall(str(n), "count", {"n": n}) for n in range(4)))])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [count], ToolLoopSettings(max_tool_executions=3)), ctx)
    assert ran == [0, 1, 2] and ctx.require(ToolLoopStop).reason is FinishReason.ITERATION_LIMIT


def test_limits_stop_the_loop_with_iteration_limit() -> None:
    looping = ScriptedLLM(lambda request: ScriptedLLM.tool_call("add", {"a": 1, "b": 1}))
    ctx = context()
    run_system_sync(ToolLoopSystem(looping, [add], ToolLoopSettings(max_llm_calls=3)), ctx)
    stop = ctx.require(ToolLoopStop)
    assert (stop.reason, stop.llm_calls, stop.tool_executions) == (FinishReason.ITERATION_LIMIT, 3, 3)
    assert not ctx.has(LlmResponse) and len(looping.requests) == 3

    ctx = context()
    run_system_sync(ToolLoopSystem(looping, [add], ToolLoopSettings(max_tool_executions=2)), ctx)
    assert ctx.require(ToolLoopStop).reason is FinishReason.ITERATION_LIMIT
    assert len(ctx.require(ToolExecutions).executions) == 2


def test_the_policy_can_deny_a_call_which_then_never_runs() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("fail"), "unreachable"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [fail], ToolLoopSettings(policy=lambda ctx, call: "not on weekends")), ctx)
    assert ctx.require(ToolLoopStop).reason is FinishReason.POLICY_DENIED
    assert ctx.require(ToolLoopStop).detail == "not on weekends"
    assert [(f.source, f.kind) for f in ctx.failures] == [(FailureSource.TOOL, FailureKind.POLICY)]
    assert not ctx.has(ToolExecutions) and llm.remaining == 1


def test_plan_mode_from_metadata_intercepts_tool_calls() -> None:
    calls: list[int] = []

    @tool
    def count() -> str:
        """Count."""
        calls.append(1)
        return "1"

    llm = ScriptedLLM([ScriptedLLM.tool_call("count", text="I will count")])
    ctx = context(metadata={"plan_mode": "true"})
    run_system_sync(ToolLoopSystem(llm, [count]), ctx)
    plan = ctx.require(PlanProposal)
    assert plan.text == "I will count" and [c.name for c in plan.tool_calls] == ["count"]
    assert ctx.require(ToolLoopStop).reason is FinishReason.PLAN_MODE and calls == []


def test_model_errors_voice_attachments_and_empty_replies() -> None:
    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM([RuntimeError("socket closed")])), ctx)
    assert ctx.require(LlmFailure).kind is FailureKind.EXCEPTION
    assert ctx.failures[0].source is FailureSource.LLM

    @tool
    def photo() -> Attachment:
        """A photo."""
        return Attachment("cat.jpg", "image/jpeg", b"jpg")

    ctx = context()
    llm = ScriptedLLM([ScriptedLLM.tool_call("send_voice", {"text": "meow"}), ScriptedLLM.tool_call("photo"), ""])
    run_system_sync(ToolLoopSystem(llm, [photo]), ctx)
    response = ctx.require(LlmResponse)
    assert (response.text, response.voice_text, [a.name for a in response.attachments]) == ("", "meow", ["cat.jpg"])

    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM(["   "]), settings=ToolLoopSettings(voice=False)), ctx)
    assert not ctx.has(LlmResponse) and ctx.failures[0].kind is FailureKind.VALIDATION


def test_the_deadline_stops_the_loop_between_model_calls() -> None:
    clock = FakeClock()

    def slow(request: object) -> LlmReply:
        clock.advance(5)
        return ScriptedLLM.tool_call("add", {"a": 1, "b": 2})

    ctx = context(clock=clock, timeout=3.0)
    run_system_sync(ToolLoopSystem(ScriptedLLM(slow), [add]), ctx)
    assert ctx.require(ToolLoopStop).reason is FinishReason.DEADLINE


def test_a_failing_capture_hook_does_not_break_the_turn() -> None:
    def broken(execution: ToolExecution) -> None:
        raise OSError("queue full")

    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM([ScriptedLLM.tool_call("add", {"a": 1, "b": 1}), "2"]), [add], ToolLoopSettings(on_tool_execution=broken)), ctx)
    assert ctx.require(LlmResponse).text == "2" and ctx.failures == ()


def test_the_callers_tool_registry_is_left_as_it_was() -> None:
    from agentloop import ToolRegistry

    registry = ToolRegistry()
    ToolLoopSystem(ScriptedLLM(), registry)
    assert [t.name for t in registry] == []
    assert "send_voice" not in [t.name for t in ToolLoopSystem(ScriptedLLM(), registry, ToolLoopSettings(voice=False)).tools]


def test_the_calls_of_one_model_step_share_it_and_none_is_the_parent_of_another() -> None:
    llm = ScriptedLLM([
        LlmReply(tool_calls=(ToolCall("1", "add", {"a": 1, "b": 2}), ToolCall("2", "add", {"a": 2, "b": 2}))),
        ScriptedLLM.tool_call("add", {"a": 3, "b": 3}),
        "done",
    ])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [add]), ctx)
    first, second, third = ctx.require(ToolExecutions).executions
    assert first.step_id is not None and first.step_id == second.step_id != third.step_id
    assert third.step_id is not None
    assert [e.parent_id for e in (first, second, third)] == [None, None, None]


def test_a_turn_run_from_inside_a_tool_records_its_executions_as_that_executions_children() -> None:
    inner_loop = ToolLoopSystem(ScriptedLLM([ScriptedLLM.tool_call("add", {"a": 1, "b": 1}), "2"]), [add])
    inner_ctx = context("add one and one")

    @tool
    async def delegate(question: str) -> str:
        """Ask a helper agent."""
        await inner_loop.process(inner_ctx)
        return inner_ctx.require(LlmResponse).text

    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM([ScriptedLLM.tool_call("delegate", {"question": "1+1?"}), "2"]),
                                   [delegate]), ctx)
    (outer,) = ctx.require(ToolExecutions).executions
    (inner,) = inner_ctx.require(ToolExecutions).executions
    assert outer.parent_id is None and inner.parent_id == outer.id and outer.result == "2"


def test_tool_output_is_capped_before_the_model_and_capture_see_it() -> None:
    @tool
    def dump() -> str:
        """A huge result."""
        return "x" * 50_000_000

    captured: list[ToolExecution] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("dump"), "that was a lot"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [dump], ToolLoopSettings(on_tool_execution=captured.append)), ctx)
    (told,) = [m.content or "" for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told.endswith("\n…[cut: 50,000,000 bytes, 64 KB kept]") and len(told.encode()) < 64 * 1024 + 100
    assert captured[0].result == told

    llm = ScriptedLLM([ScriptedLLM.tool_call("dump"), "ok"])
    run_system_sync(ToolLoopSystem(llm, [dump], ToolLoopSettings(max_tool_output_bytes=1000)), context())
    (told,) = [m.content or "" for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told == "x" * 1000 + "\n…[cut: 50,000,000 bytes, 1,000 bytes kept]"


def test_the_standard_pipeline_passes_its_tool_output_cap_on(tmp_path: Path) -> None:
    options = StandardOptions(max_tool_output_bytes=1000)
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path, options=options) as pipeline:
        assert pipeline.get(ToolLoopSystem).settings.max_tool_output_bytes == 1000


def test_the_standard_pipeline_hands_the_tool_loop_every_tool_loop_option_in_one_settings_object(tmp_path: Path) -> None:
    def deny(ctx: AgentContext, call: ToolCall) -> str | None:
        return None

    def approve(ctx: AgentContext, call: ToolCall) -> bool:
        return False

    options = StandardOptions(max_llm_calls=3, max_tool_executions=4, plan_mode=False, tool_policy=deny, voice=False,
                              model="m", temperature=0.5, company_id="acme", max_tool_output_bytes=99)
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path, options=options, approval=approve) as pipeline:
        assert pipeline.get(ToolLoopSystem).settings == ToolLoopSettings(
            max_llm_calls=3, max_tool_executions=4, plan_mode=False, policy=deny, voice=False, model="m",
            temperature=0.5, max_tool_output_bytes=99, approval=approve, company_id="acme",
        )


def test_the_old_tool_loop_keywords_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"ToolLoopSystem\(max_llm_calls=, voice=\.\.\.\).*ToolLoopSettings"):
        system = ToolLoopSystem(ScriptedLLM(), [add], max_llm_calls=2, voice=False)
    assert system.settings == ToolLoopSettings(max_llm_calls=2, voice=False)
    assert [t.name for t in system.tools] == ["add"]


def test_tool_loop_settings_refuse_limits_that_allow_no_work() -> None:
    for bad in ({"max_llm_calls": 0}, {"max_tool_executions": -1}, {"max_tool_output_bytes": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ToolLoopSettings(**bad)


def test_arguments_that_are_not_json_go_back_to_the_model_which_can_then_answer(tmp_path: Path) -> None:
    bad = ToolCall("1", "add", arguments_error="they are not valid JSON (Expecting ',' delimiter)")
    llm = ScriptedLLM([LlmReply(tool_calls=(bad,)), ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), "1+2 is 3"])
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[add]) as pipeline:
        ctx = pipeline.build().run_turn_sync(Session("s1"), IncomingMessage("what is 1+2?"))
    told = [m.content or "" for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told[0].startswith("error: the arguments of 'add' could not be read: they are not valid JSON")
    assert told[1] == "3"
    outcome = ctx.turn_outcome
    assert outcome is not None and outcome.finish_reason is FinishReason.SUCCESS and outcome.assistant_text == "1+2 is 3"
    assert [(f.source, f.kind) for f in ctx.failures] == [(FailureSource.TOOL, FailureKind.VALIDATION)]


def test_a_tool_output_and_model_text_that_no_store_could_take_are_made_storable(tmp_path: Path) -> None:
    @tool
    def listing() -> str:
        """Names in a folder, as os.listdir gives them for bytes that are not UTF-8."""
        return "report-\udcff.txt"

    stores = open_stores(tmp_path)
    store = stores.trajectories
    recorder = TrajectoryRecorder(store, clock=FakeClock())
    llm = ScriptedLLM([ScriptedLLM.tool_call("listing", text="let me look \udcfe"), "found report-\udcff.txt"])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [listing], ToolLoopSettings(on_tool_execution=recorder.enqueue)), ctx)
    assert ctx.require(LlmResponse).text == "found report-\ufffd.txt"
    assert llm.requests[-1].messages[-2].content == "let me look \ufffd"
    assert recorder.flush() == 1
    (stored,) = asyncio.run(store.load("s1")).executions
    assert stored.result == "report-\ufffd.txt" and recorder.stats.quarantined == 0
    stores.close()


def test_the_answer_reaches_the_user_while_the_model_is_still_writing_it() -> None:
    channel = RecordingChannel()
    shown_midway: list[str] = []

    class SlowWriter:
        async def complete(self, request: object) -> LlmReply:
            raise AssertionError("the tool loop streams")

        async def stream(self, request: object) -> AsyncIterator[StreamEvent]:
            yield TextDelta("1+2 ")
            await asyncio.sleep(0)
            shown_midway.append(channel.streams[0].shown)
            yield TextDelta("is 3")
            yield Finished(LlmReply("1+2 is 3"))

    ctx = context()
    run_system_sync(ToolLoopSystem(SlowWriter(), channel=channel), ctx)
    assert shown_midway == ["1+2 "]
    streamed = ctx.require(StreamedText)
    assert (streamed.text, streamed.complete) == ("1+2 is 3", True)
    assert channel.streams[0].closed is None and channel.texts == []  # routing finishes the delivery
    assert ctx.require(LlmResponse).text == "1+2 is 3"


def test_every_model_step_streams_into_one_message_of_the_turn() -> None:
    channel = RecordingChannel()
    llm = ScriptedLLM([ScriptedLLM.tool_call("add", {"a": 1, "b": 2}, text="Adding. "), "1+2 is 3"], chunk=4)
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [add], channel=channel), ctx)
    (stream,) = channel.streams
    assert stream.deltas == ["Addi", "ng. ", "1+2 ", "is 3"]
    assert ctx.require(StreamedText).text == "Adding. 1+2 is 3"


def test_nothing_streams_in_auto_mode_to_a_channel_that_cannot_or_before_any_text() -> None:
    class WholeTexts:
        async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None: ...
        async def send_voice(self, session: Session, text: str) -> None: ...
        async def send_attachment(self, session: Session, attachment: Attachment) -> None: ...

    channel = RecordingChannel()
    for ctx, target in ((context(auto_mode=True), channel), (context(), WholeTexts())):
        run_system_sync(ToolLoopSystem(ScriptedLLM(["3"]), channel=target), ctx)
        assert ctx.require(LlmResponse).text == "3" and not ctx.has(StreamedText)
    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM([LlmCallError("busy", kind=FailureKind.RATE_LIMIT)]), channel=channel), ctx)
    assert channel.streams == [] and not ctx.has(StreamedText) and ctx.has(LlmFailure)


def test_a_stream_cut_midway_is_the_model_failure_and_records_the_partial_text_as_incomplete() -> None:
    channel = RecordingChannel()
    llm = ScriptedLLM([ScriptedLLM.cut("1+2 is 3", after=1)], chunk=4)
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, channel=channel), ctx)
    assert ctx.require(LlmFailure).kind is FailureKind.UNKNOWN and not ctx.has(LlmResponse)
    streamed = ctx.require(StreamedText)
    assert (streamed.text, streamed.complete) == ("1+2 ", False)
    assert [(f.source, f.kind) for f in ctx.failures] == [(FailureSource.LLM, FailureKind.UNKNOWN)]


def test_a_channel_that_fails_mid_stream_is_one_transport_failure_and_the_model_still_answers() -> None:
    channel = RecordingChannel()
    channel.fail_with(kinds=("delta",))
    ctx = context()
    run_system_sync(ToolLoopSystem(ScriptedLLM(["1+2 is 3"], chunk=2), channel=channel), ctx)
    assert [(f.source, f.message) for f in ctx.failures] == [(FailureSource.TRANSPORT, "the chat service is unreachable")]
    assert channel.failed == ["delta"] and ctx.require(LlmResponse).text == "1+2 is 3"


def test_the_tool_loop_withdraws_what_the_failed_model_streamed_and_records_the_fallback() -> None:
    channel = RecordingChannel()
    first = ScriptedLLM([ScriptedLLM.cut("I think the", after=1)], model="big", chunk=4)
    ctx = context()
    run_system_sync(ToolLoopSystem(FallbackLLM([first, ScriptedLLM(["3"], model="small")]), channel=channel), ctx)
    withdrawn, answer = channel.streams
    assert withdrawn.deltas == ["I th"] and withdrawn.aborted == "model 'big' failed; 'small' answers instead"
    assert answer.deltas == ["3"] and answer.aborted is None
    assert (ctx.require(StreamedText).text, ctx.require(StreamedText).complete) == ("3", True)
    assert ctx.require(LlmResponse).model == "small"
    (failure,) = ctx.failures
    assert failure.source is FailureSource.LLM and failure.message.startswith("model 'big' failed, so 'small' was asked instead")


def test_token_usage_adds_up_over_the_model_calls_of_the_turn_and_is_counted() -> None:
    metrics = InMemoryMetrics()
    llm = ScriptedLLM([
        attrs.evolve(ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), usage=Usage(100, 10)),
        LlmReply("3", usage=Usage(120, 2)),
    ])
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [add], metrics=metrics), ctx)
    assert ctx.require(LlmResponse).usage == Usage(220, 12)
    labels = {"model": "scripted"}
    assert metrics.counter("agentloop.llm.input_tokens", labels) == 220
    assert metrics.counter("agentloop.llm.output_tokens", labels) == 12
