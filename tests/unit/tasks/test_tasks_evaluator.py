"""Tests for agentloop.tasks.evaluator: context flow, substitution, subtasks, scripts, I10."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    AgentContext,
    AgentLoop,
    FinishReason,
    IncomingMessage,
    Role,
    Session,
    System,
    TurnOutcome,
    history_scope,
    knowledge_scope,
    memory_scope,
)
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM
from agentloop.testing.strategies import task_notes
from agentloop.testing.tasks import task_loop
from agentloop.tasks import (
    ContextManagementWarning,
    Evaluator,
    ResourceExhaustedError,
    ScriptsNotAllowedError,
    SubtaskRequest,
    TaskFailedError,
    TaskFailureReason,
    TaskStatus,
    TaskTrace,
    TaskTurn,
    TemplateRegistry,
    as_subtask,
    format_reply,
)
from agentloop.tasks.script import run_command
from systems import standard_pipeline


def _registry(xml: str, *, allow_scripts: bool = False) -> TemplateRegistry:
    registry = TemplateRegistry(allow_scripts=allow_scripts)
    registry.register_string(xml)
    return registry


def _atomic(name: str, description: str, settings_xml: str = "", inputs: str = "") -> str:
    block = f"<context_management>{settings_xml}</context_management>" if settings_xml else ""
    return f'<task name="{name}" type="atomic"><description>{description}</description>{inputs}{block}</task>'


def _echo(turn: TaskTurn) -> str:
    return format_reply(turn.instruction)


@pytest.mark.parametrize(
    ("settings_xml", "inputs", "expected"),
    [
        ("", "", {"topic": "cats", "secret": "s"}),
        ("<inherit_context>none</inherit_context><fresh_context>enabled</fresh_context>", "", {}),
        ("<inherit_context>subset</inherit_context>", '<inputs><input name="topic"/></inputs>', {"topic": "cats"}),
    ],
)
def test_inherit_context_decides_what_the_turn_receives(settings_xml: str, inputs: str, expected: dict[str, str]) -> None:
    registry = _registry(_atomic("t", "Go", settings_xml, inputs))
    loop, system = task_loop(_echo)
    Evaluator(registry, loop).run_sync("t", {"topic": "x"}, context={"topic": "cats", "secret": "s"})
    (turn,) = system.turns
    assert dict(turn.context) == expected
    assert turn.fresh_context is ("enabled" in settings_xml)


def test_a_sequence_passes_its_own_context_to_its_steps() -> None:
    xml = (
        '<task name="s" type="sequential"><description>S</description>'
        "<context_management><inherit_context>none</inherit_context></context_management>"
        '<steps><task type="atomic"><description>One</description></task></steps></task>'
    )
    loop, system = task_loop(_echo)
    Evaluator(_registry(xml), loop).run_sync("s", context={"k": "v"})
    assert dict(system.turns[0].context) == {}


def test_accumulate_data_false_shows_no_history() -> None:
    xml = (
        '<task name="s" type="sequential"><description>S</description>'
        "<context_management><accumulate_data>false</accumulate_data></context_management>"
        '<steps><task type="atomic"><description>One</description></task>'
        '<task type="atomic"><description>Two</description></task></steps></task>'
    )
    loop, system = task_loop(_echo)
    Evaluator(_registry(xml), loop).run_sync("s")
    assert [t.history for t in system.turns] == [(), ()]


def test_substitution_is_one_literal_pass() -> None:
    loop, system = task_loop(_echo)
    registry = _registry(_atomic("t", "Say {{ a }} and {{b}}"))
    result = Evaluator(registry, loop).run_sync("t", {"a": "{{b}}", "b": ["x", "y"]})
    assert result.content == "Say {{b}} and x\ny"


def test_a_missing_input_fails_before_any_turn() -> None:
    loop, system = task_loop(_echo)
    registry = _registry(_atomic("t", "Say {{a}}", inputs='<inputs><input name="a"/><input name="b"/></inputs>'))
    with pytest.raises(TaskFailedError, match=r"task 't' needs input\(s\) 'a', 'b'") as caught:
        Evaluator(registry, loop).run_sync("t")
    assert caught.value.reason is TaskFailureReason.INPUT_VALIDATION_FAILURE
    undeclared = _registry(_atomic("u", "Say {{zzz}}"))
    with pytest.raises(TaskFailedError, match=r"task 'u' uses \{\{zzz\}\} but no input 'zzz' was given"):
        Evaluator(undeclared, loop).run_sync("u")
    assert system.turns == []


def test_previous_notes_reach_every_atomic_turn_and_the_trace_counts_turns() -> None:
    xml = (
        '<task name="s" type="sequential"><description>S</description><steps>'
        '<task type="atomic"><description>One</description></task>'
        '<task type="atomic"><description>Two</description></task></steps></task>'
    )
    loop, system = task_loop(_echo)
    trace = TaskTrace()
    Evaluator(_registry(xml), loop).run_sync("s", previous_notes="## Attempt 1 — a (t)", trace=trace)
    assert [t.previous_notes for t in system.turns] == ["## Attempt 1 — a (t)"] * 2
    assert trace.turns == 2
    assert trace.render().endswith("One\n\n### atomic task at <string> line 1\nTwo")


def test_a_turn_that_ends_badly_is_a_halted_task() -> None:
    class Broken(System):
        order = 10
        writes = (TurnOutcome,)

        def process(self, ctx: AgentContext) -> None:
            ctx.set(TurnOutcome(FinishReason.ERROR, assistant_text="oops", auto_mode=True))

    class Silent(System):
        order = 10

        def process(self, ctx: AgentContext) -> None:
            raise RuntimeError("model unreachable")

    registry = _registry(_atomic("t", "Go"))
    with pytest.raises(TaskFailedError, match="the turn finished with error") as caught:
        Evaluator(registry, AgentLoop([Broken()])).run_sync("t")
    assert caught.value.reason is TaskFailureReason.EXECUTION_HALTED
    with pytest.raises(TaskFailedError, match="without a TurnOutcome .*model unreachable"):
        Evaluator(registry, AgentLoop([Silent()])).run_sync("t")


def test_a_malformed_reply_fails_the_task_with_output_format_failure() -> None:
    loop, _ = task_loop(["answer\n```task-result\n{oops}\n```"])
    with pytest.raises(TaskFailedError) as caught:
        Evaluator(_registry(_atomic("t", "Go")), loop).run_sync("t")
    assert caught.value.reason is TaskFailureReason.OUTPUT_FORMAT_FAILURE
    assert caught.value.result is not None and caught.value.result.content == "answer"


def test_an_ad_hoc_subtask_runs_with_subtask_defaults() -> None:
    def reply(turn: TaskTurn) -> str:
        if turn.instruction == "Parent" and not turn.subtask_results:
            request = SubtaskRequest(description="Find {{what}}", inputs={"what": "keys"})
            return format_reply("", status=TaskStatus.CONTINUATION, subtask=request)
        return format_reply(f"did {turn.instruction}")

    loop, system = task_loop(reply)
    result = Evaluator(_registry(_atomic("p", "Parent")), loop).run_sync("p", context={"k": "v"})
    assert result.content == "did Parent"
    child = system.turns[1]
    assert (child.instruction, dict(child.context), child.fresh_context, child.depth) == ("Find keys", {}, True, 1)
    assert system.turns[2].subtask_results[0].output == "did Find keys"


def test_an_explicit_inherit_setting_wins_over_the_subtask_defaults_at_load_and_at_spawn() -> None:
    """One rule for both paths: a template loaded as a subtask and one a CONTINUATION
    spawns as a subtask resolve explicit inherit_context=full the same way."""
    full = "<inherit_context>full</inherit_context>"
    registry = _registry(
        f"<templates>{_atomic('helper', 'Help', full)}"
        f'<task name="sub" type="atomic" subtype="subtask"><description>Sub</description>'
        f"<context_management>{full}</context_management></task></templates>"
    )
    spawned = as_subtask(registry.get("helper"))
    loaded = registry.get("sub")
    assert spawned.context == loaded.context
    assert spawned.context.inherit_context.value == "full" and not spawned.context.fresh


def test_a_reduce_with_explicit_full_inheritance_loads_and_passes_its_context_on() -> None:
    registry = _registry(
        '<task name="total" type="reduce"><description>Combine</description>'
        "<context_management><inherit_context>full</inherit_context></context_management>"
        '<inner_task><task type="atomic"><description>Sum {{item}}</description></task></inner_task>'
        '<reduction_task><task type="atomic"><description>Merge {{current}}</description></task></reduction_task>'
        "</task>"
    )
    loop, system = task_loop(_echo)
    Evaluator(registry, loop).run_sync("total", {"items": ["a"]}, context={"k": "v"})
    assert [(dict(t.context), t.fresh_context) for t in system.turns] == [({"k": "v"}, False)] * 2


def test_continuations_are_limited() -> None:
    request = SubtaskRequest(description="again")

    def reply(turn: TaskTurn) -> str:
        if turn.instruction == "again":
            return format_reply("ok")
        return format_reply("", status=TaskStatus.CONTINUATION, subtask=request)

    loop, system = task_loop(reply)
    with pytest.raises(ResourceExhaustedError, match="more than 2 subtasks in a row") as caught:
        Evaluator(_registry(_atomic("t", "Loop")), loop, max_continuations=2).run_sync("t")
    assert (caught.value.resource, caught.value.limit) == ("continuations", 2)
    assert len(system.turns) == 5


def test_a_subtask_naming_an_unknown_template_fails_clearly() -> None:
    loop, _ = task_loop(
        [format_reply("", status=TaskStatus.CONTINUATION, subtask=SubtaskRequest(template="nowhere"))]
    )
    with pytest.raises(TaskFailedError, match="requested a subtask: no task template named 'nowhere'"):
        Evaluator(_registry(_atomic("t", "Go")), loop).run_sync("t")


def test_reduce_over_lines_of_a_string_and_a_missing_input() -> None:
    xml = (
        '<task name="r" type="reduce" over="chapters"><description>R</description>'
        '<inner_task><task type="atomic"><description>{{index}}:{{item}}</description></task></inner_task>'
        '<reduction_task><task type="atomic"><description>{{accumulator}}{{current}};</description></task>'
        "</reduction_task></task>"
    )
    loop, _ = task_loop(_echo)
    evaluator = Evaluator(_registry(xml), loop)
    assert evaluator.run_sync("r", {"chapters": "a\n\nb\n", "accumulator": ">"}).content == ">1:a;2:b;"
    with pytest.raises(TaskFailedError, match="runs over input 'chapters', which was not given"):
        evaluator.run_sync("r")


# --- scripts --------------------------------------------------------------------------

def _script(args: list[str], timeout: str = "") -> str:
    attribute = f' timeout="{timeout}"' if timeout else ""
    argv = "".join(f"<arg>{a}</arg>" for a in args)
    return f'<task name="s" type="script"><description>S</description><command{attribute}>{argv}</command></task>'


def test_a_script_substitutes_each_argument_without_a_shell() -> None:
    registry = _registry(_script([sys.executable, "-c", "import sys; print(sys.argv[1:])", "{{a}}", "$HOME;ls"]), allow_scripts=True)
    loop, _ = task_loop(_echo)
    result = Evaluator(registry, loop).run_sync("s", {"a": "two words"})
    assert result.content == "['two words', '$HOME;ls']\n"
    assert result.notes == {"exit_code": 0, "stderr": ""}


def test_a_script_that_exits_non_zero_fails_with_its_stderr() -> None:
    code = "import sys; sys.stderr.write('bad input'); sys.exit(3)"
    registry = _registry(_script([sys.executable, "-c", code]), allow_scripts=True)
    with pytest.raises(TaskFailedError, match="exited with status 3: bad input") as caught:
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s")
    assert caught.value.result is not None and caught.value.result.notes["exit_code"] == 3


def test_a_script_past_its_timeout_is_killed() -> None:
    registry = _registry(_script([sys.executable, "-c", "import time; time.sleep(30)"], timeout="0.3"), allow_scripts=True)
    started = time.monotonic()
    with pytest.raises(TaskFailedError, match="did not finish within 0.3s and was killed") as caught:
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s")
    assert caught.value.reason is TaskFailureReason.EXECUTION_TIMEOUT
    assert time.monotonic() - started < 10


def _escaping_script(pid_file: Path) -> list[str]:
    """A script that starts a child in a session of its own (out of its process group, holding
    its stdout and stderr open for 30 s), writes the child's pid to `pid_file`, then sleeps."""
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen(['sleep', '30'], start_new_session=True); "
        "open(sys.argv[1], 'w').write(str(child.pid)); time.sleep(30)"
    )
    return [sys.executable, "-c", code, str(pid_file)]


def _kill_escaped(pid_file: Path) -> None:
    with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_script_whose_child_left_its_process_group_still_ends_at_its_timeout(tmp_path: Path) -> None:
    """Waiting for the escaped child to close the pipes held the attempt until it exited."""
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    try:
        with pytest.raises(TaskFailedError, match="did not finish within 1s and was killed"):
            asyncio.run(run_command(_escaping_script(pid_file), timeout=1.0, label="s"))
        assert time.monotonic() - started < 5
    finally:
        _kill_escaped(pid_file)


def test_a_cancelled_script_whose_child_left_its_process_group_is_stopped_at_once(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"

    async def cancel_it() -> float:
        task = asyncio.create_task(run_command(_escaping_script(pid_file), timeout=60.0, label="s"))
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.05)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    try:
        assert asyncio.run(cancel_it()) < 3
    finally:
        _kill_escaped(pid_file)


def test_a_missing_program_fails_clearly() -> None:
    registry = _registry(_script(["/nonexistent/program"]), allow_scripts=True)
    with pytest.raises(TaskFailedError, match="could not start '/nonexistent/program'"):
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s")


def test_script_output_past_the_limit_is_read_but_not_kept() -> None:
    """Without the cap, `head -c 300000000 /dev/zero` held 300 MB in memory per stream."""
    code = "import sys; sys.stdout.write('x' * 5_000_000); sys.stderr.write('e' * 1_500_000)"
    registry = _registry(_script([sys.executable, "-c", code]), allow_scripts=True)
    result = Evaluator(registry, task_loop(_echo)[0], script_output_limit=1_000_000).run_sync("s")
    kept, marker = result.content.split("\n", 1)
    assert kept == "x" * 1_000_000
    assert marker == "[... stdout cut: kept the first 1000000 of 5000000 bytes ...]"
    assert result.notes["truncated"] == {"stdout": 5_000_000, "stderr": 1_500_000}
    assert result.notes["stderr"].endswith("[... stderr cut: kept the first 1000000 of 1500000 bytes ...]")


def test_script_output_within_the_limit_is_kept_whole_by_default() -> None:
    registry = _registry(_script(["head", "-c", "1048576", "/dev/zero"]), allow_scripts=True)
    result = Evaluator(registry, task_loop(_echo)[0]).run_sync("s")
    assert result.content == "\0" * 1_048_576 and "truncated" not in result.notes


def test_a_nul_byte_in_a_script_input_fails_the_task() -> None:
    registry = _registry(_script(["echo", "{{a}}"]), allow_scripts=True)
    with pytest.raises(TaskFailedError, match="argument 2 holds a NUL byte") as caught:
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s", {"a": "one\x00two"})
    assert caught.value.reason is TaskFailureReason.INPUT_VALIDATION_FAILURE


def test_a_script_input_no_program_can_receive_fails_the_task_once() -> None:
    """A lone high surrogate cannot be encoded for the command line: the task fails with a
    reason instead of a raw UnicodeEncodeError that would abort and requeue it forever."""
    registry = _registry(_script(["echo", "{{a}}"]), allow_scripts=True)
    with pytest.raises(TaskFailedError, match=r"argument 2 holds '\\ud800'") as caught:
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s", {"a": "report-\ud800.txt"})
    assert caught.value.reason is TaskFailureReason.INPUT_VALIDATION_FAILURE


@pytest.mark.parametrize("value", ["-rf", "--output=/etc/passwd", "-"])
def test_an_input_cannot_open_an_option_the_template_did_not(value: str) -> None:
    registry = _registry(_script(["echo", "{{a}}"]), allow_scripts=True)
    with pytest.raises(TaskFailedError, match="argument 2 .'{{a}}'. became .* read as an option") as caught:
        Evaluator(registry, task_loop(_echo)[0]).run_sync("s", {"a": value})
    assert caught.value.reason is TaskFailureReason.INPUT_VALIDATION_FAILURE


def test_after_a_double_dash_an_input_is_passed_as_an_operand() -> None:
    code = "import sys; print(sys.argv[1:])"
    registry = _registry(
        _script([sys.executable, "-c", code, "--name={{a}}", "--", "{{a}}", "{{b}}"]), allow_scripts=True
    )
    result = Evaluator(registry, task_loop(_echo)[0]).run_sync("s", {"a": "-rf", "b": "--help"})
    assert result.content == "['--name=-rf', '--', '-rf', '--help']\n"


def test_the_evaluator_refuses_a_script_when_its_registry_does_not_allow_them() -> None:
    template = _registry(_script(["true"]), allow_scripts=True).get("s")
    strict = TemplateRegistry()
    with pytest.raises(ScriptsNotAllowedError, match="script task 's' is refused"):
        asyncio.run(Evaluator(strict, task_loop(_echo)[0]).run_template(template))


# --- I10 ------------------------------------------------------------------------------

SEQUENCE = (
    '<task name="seq" type="sequential"><description>S</description>'
    "<context_management><accumulation_format>{fmt}</accumulation_format></context_management><steps>"
    + "".join(f'<task type="atomic"><description>Step {i}</description></task>' for i in range(3))
    + "</steps></task>"
)


@settings(max_examples=40, deadline=None)
@given(
    notes=st.lists(task_notes, min_size=3, max_size=3),
    fmt=st.sampled_from(["notes_only", "full_output"]),
)
def test_notes_pass_through_sequential_accumulation_unchanged(notes: list[dict[str, Any]], fmt: str) -> None:
    """I10: each step's notes reach later steps and the result exactly as the task wrote them."""
    loop, system = task_loop([format_reply(f"out {i}", notes=n) for i, n in enumerate(notes)])
    result = Evaluator(_registry(SEQUENCE.format(fmt=fmt)), loop, clock=FakeClock()).run_sync("seq")
    assert [entry.notes for entry in system.turns[2].history] == notes[:2]
    assert [entry.output for entry in system.turns[2].history] == (
        ["out 0", "out 1"] if fmt == "full_output" else [None, None]
    )
    assert result.notes == notes[2]


def test_fresh_context_reaches_turns_that_inherit_from_a_fresh_task() -> None:
    xml = (
        "<templates>"
        '<task name="r" type="reduce"><description>R</description>'
        '<inner_task><task type="atomic"><description>in {{item}}</description></task></inner_task>'
        '<reduction_task><task type="atomic"><description>red</description>'
        "<context_management><inherit_context>none</inherit_context></context_management></task></reduction_task>"
        "</task>"
        '<task name="s" type="sequential"><description>S</description>'
        '<steps><task type="atomic"><description>step</description></task></steps></task>'
        "</templates>"
    )
    loop, system = task_loop(_echo)
    with pytest.warns(ContextManagementWarning, match="no context at all"):
        registry = _registry(xml)
    evaluator = Evaluator(registry, loop)
    evaluator.run_sync("r", {"items": ["a"]})
    evaluator.run_sync("s")
    assert [(t.instruction, t.fresh_context) for t in system.turns] == [
        ("in a", True),
        ("red", False),
        ("step", False),
    ]


def test_task_turns_in_the_standard_pipeline_are_stored_nowhere_and_retrieve_only_with_fresh_context(
    tmp_path: Path,
) -> None:
    llm = ScriptedLLM(["Blue it is.", format_reply("plain done"), format_reply("fresh done")])
    chat, tasks = Session("chat", user_id="ada"), Session("tasks", user_id="ada")
    fresh = "<inherit_context>none</inherit_context><fresh_context>enabled</fresh_context>"
    registry = _registry(_atomic("plain", "Pick a colour"))
    registry.register_string(_atomic("fresh", "Pick a colour", fresh))
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path) as pipeline:
        loop = pipeline.build()
        loop.run_turn_sync(chat, IncomingMessage("My favourite colour is blue"))
        evaluator = Evaluator(registry, loop, session=tasks)
        assert evaluator.run_sync("plain").content == "plain done"
        assert evaluator.run_sync("fresh").content == "fresh done"
        assert pipeline.stores is not None
        task_history = asyncio.run(pipeline.stores.sessions.recent(history_scope(tasks), 10))
        memory = asyncio.run(pipeline.stores.memory.recent(memory_scope(chat), 10))
        indexed = asyncio.run(pipeline.stores.rag.texts(knowledge_scope(tasks)))
    shown = [request.messages[0].content or "" for request in llm.requests[1:]]
    assert [m.role for m in llm.requests[1].messages] == [Role.SYSTEM, Role.USER]
    assert ["What you told this user before" in prompt for prompt in shown] == [False, True]
    assert task_history == () and [entry.assistant_text for entry in memory] == ["Blue it is."]
    assert indexed == ["Blue it is."]  # the task answers are not indexed as earlier answers either


def test_a_template_input_with_bytes_no_store_takes_reaches_the_model_storable(tmp_path: Path) -> None:
    """A file name that is not UTF-8 (a lone surrogate) or a NUL in a task input is made
    storable where the turn's text enters the pipeline, so the task runs instead of failing."""
    llm = ScriptedLLM([format_reply("listed")])
    registry = _registry(_atomic("list", "Describe {{name}}", inputs='<inputs><input name="name"/></inputs>'))
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path) as pipeline:
        result = Evaluator(registry, pipeline.build()).run_sync("list", {"name": "report-\udcff.txt\x00"})
    assert result.content == "listed"
    prompt = llm.requests[0].messages[-1].content or ""
    assert "report-\ufffd.txt" in prompt and "\x00" not in prompt
    prompt.encode("utf-8")
