"""The `agentloop` command line."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import attrs
import pexpect
import psycopg
import structlog

from agentloop.adapters.urls import shown_url
from agentloop import Session
from agentloop.bots import open_bot
from agentloop.cli import Chat, converse, main, parse_inputs
from agentloop.cli.chat import _log_to_console
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM
from agentloop.testing.anthropic_server import message_events, queue_stream
from agentloop.testing.http import ScriptedServer, completion, free_port, streamed_completion
from learning_kit import NOTE

FACTORIES = textwrap.dedent(
    """
    import attrs
    from agentloop import AgentContext, AgentLoop, System

    @attrs.frozen
    class Draft:
        text: str

    class Drafter(System):
        order, writes = 10, (Draft,)
        def process(self, ctx: AgentContext) -> None: ...

    class Reviewer(System):
        order, reads = 20, (Draft,)
        def process(self, ctx: AgentContext) -> None: ...

    def as_list():
        return [Reviewer(), Drafter()]

    def as_loop():
        return AgentLoop(as_list())

    CLOSED = []

    class Builder:
        def build(self):
            return as_loop()

        def close(self):
            CLOSED.append(self)

    def as_builder():
        return Builder()

    def broken():
        Reviewer.order = 5
        Drafter.order = 10
        return [Reviewer(), Drafter()]

    def wrong():
        return 42

    def needs_arguments(llm, channel, stores):
        from systems import standard_pipeline
        return standard_pipeline(llm, channel, stores=stores)

    def needs_config(config):
        return []

    def for_worker(stores):
        return AgentLoop([Drafter()])
    """
)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_bot_pipeline.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_bot_pipeline"


@pytest.mark.parametrize("factory", ["as_list", "as_loop", "as_builder"])
def test_pipeline_show_prints_the_ordered_table(user_module: str, factory: str) -> None:
    out = io.StringIO()
    assert main(["pipeline", "show", f"{user_module}:{factory}"], out) == 0
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert rows[2] == ["10", "Drafter", "-", "Draft"] and rows[3] == ["20", "Reviewer", "Draft", "-"]


def test_pipeline_show_closes_a_builder_it_built(user_module: str) -> None:
    import importlib

    closed = importlib.import_module(user_module).CLOSED
    before = len(closed)
    assert main(["pipeline", "show", f"{user_module}:as_builder"], io.StringIO()) == 0
    assert len(closed) == before + 1


def test_pipeline_show_gives_a_factory_the_llm_channel_and_stores_it_names(user_module: str) -> None:
    """A factory had to take no arguments, so a pipeline on the bot's model and stores could not be shown."""
    out = io.StringIO()
    assert main(["pipeline", "show", f"{user_module}:needs_arguments"], out) == 0
    names = [line.split()[1] for line in out.getvalue().splitlines()[2:]]
    assert names[:4] == ["InputSanitizationSystem", "ContextBuildingSystem", "ToolLoopSystem", "TurnOutcomeFinalizationSystem"]


def test_pipeline_show_mermaid(user_module: str) -> None:
    out = io.StringIO()
    assert main(["pipeline", "show", "--mermaid", f"{user_module}:as_list"], out) == 0
    assert out.getvalue().splitlines()[0] == "flowchart TD"
    assert "    s0 -. Draft .-> s1" in out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "expected MODULE:FACTORY"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("{m}:missing", "has no callable 'missing'"),
        ("{m}:wrong", "returned int"),
        ("{m}:broken", "does not build: Reviewer (order 5) reads Draft"),
        ("{m}:needs_config", "takes 'config', which this command cannot give; a factory may take llm, channel, stores"),
    ],
)
def test_pipeline_show_explains_bad_targets(
    user_module: str, target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pipeline", "show", target.format(m=user_module)], io.StringIO()) == 1
    assert message in capsys.readouterr().err


def test_a_user_module_that_fails_as_it_is_imported_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "refused_tools_module.py").write_text(
        "from agentloop import tool\n\n\n@tool\ndef lookup(query):\n    return query\n\n\ndef build():\n    return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["pipeline", "show", "refused_tools_module:build"], io.StringIO()) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("agentloop: cannot import 'refused_tools_module': ToolDefinitionError: "
                    "tool 'lookup' parameter 'query' needs a type annotation")


def test_the_console_script_is_installed() -> None:
    script = shutil.which("agentloop")
    assert script is not None, "pip install -e . should put `agentloop` on PATH"
    result = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    assert "pipeline" in result.stdout


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and "COMMAND" in capsys.readouterr().err


STANDARD_ORDER = [
    ("10", "InputSanitizationSystem"),
    ("20", "ContextBuildingSystem"),
    ("25", "NoteRetrievalSystem"),
    ("30", "ToolLoopSystem"),
    ("57", "TurnOutcomeFinalizationSystem"),
    ("59", "FeedbackGuaranteeSystem"),
    ("60", "ResponseRoutingSystem"),
    ("70", "MemoryPersistSystem"),
    ("72", "UsageRecordingSystem"),
    ("74", "CompactionSystem"),
    ("75", "RagIndexingSystem"),
    ("80", "TrajectoryCaptureSystem"),
]


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_pipeline_show_without_a_target_is_the_standard_pipeline_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    status, text = run_cli("pipeline", "show")
    assert status == 0
    rows = [tuple(line.split()[:2]) for line in text.splitlines()[2:]]
    assert rows == STANDARD_ORDER
    assert list(tmp_path.iterdir()) == []
    status, mermaid = run_cli("pipeline", "show", "--mermaid")
    assert status == 0 and mermaid.startswith("flowchart TD") and '"10 InputSanitizationSystem"' in mermaid


def test_a_bad_log_level_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--log-level", "LOUD", "pipeline", "show"], io.StringIO()) == 1
    assert capsys.readouterr().err.strip() == "agentloop: unknown log level 'LOUD'; use DEBUG, INFO, WARNING or ERROR"


GOOD = '<task name="{name}" type="atomic"><description>Say {{{{word}}}}</description><inputs><input name="word"/></inputs></task>'
BLIND = (
    '<task name="blind" type="atomic"><description>Guess</description>'
    "<context_management><inherit_context>none</inherit_context></context_management></task>"
)
MALFORMED = '<task name="broken" type="atomic">\n  <description>unclosed\n</task>\n'


def test_templates_validate_a_good_file(tmp_path: Path) -> None:
    (tmp_path / "good.xml").write_text(GOOD.format(name="good"))
    assert run_cli("templates", "validate", str(tmp_path / "good.xml")) == (0, "ok: 1 file(s), 0 error(s), 0 warning(s)\n")


def test_templates_validate_a_malformed_template_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "good.xml").write_text(GOOD.format(name="good"))
    (tmp_path / "broken.xml").write_text(MALFORMED)
    status, text = run_cli("templates", "validate", str(tmp_path))
    assert status == 1
    lines = text.splitlines()
    assert lines[0].startswith(f"error: template {tmp_path / 'broken.xml'} line 3: is not well-formed XML")
    assert lines[-1] == "invalid: 2 file(s), 1 error(s), 0 warning(s)"


def test_templates_validate_prints_warnings_but_passes(tmp_path: Path) -> None:
    (tmp_path / "blind.xml").write_text(BLIND)
    status, text = run_cli("templates", "validate", str(tmp_path))
    assert status == 0
    assert text.splitlines()[0].startswith(f"warning: template {tmp_path / 'blind.xml'} line 1: inherit_context=none")
    assert text.splitlines()[-1] == "ok: 1 file(s), 0 error(s), 1 warning(s)"


@pytest.mark.parametrize(("make", "message"), [(False, "does not exist"), (True, "no *.xml templates under")])
def test_templates_validate_needs_templates(
    tmp_path: Path, make: bool, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "templates"
    if make:
        target.mkdir()
    assert run_cli("templates", "validate", str(target))[0] == 1
    assert message in capsys.readouterr().err


TASKS = textwrap.dedent(
    """
    <templates>
      <task name="report" type="sequential">
        <description>Gather facts, then write the report</description>
        <steps>
          <task type="atomic"><description>List facts about {{topic}}</description></task>
          <task type="atomic"><description>Write the report on {{topic}}</description></task>
        </steps>
      </task>
      <task name="total" type="reduce">
        <description>Combine the chapters</description>
        <inner_task><task type="atomic"><description>Summarize {{item}}</description></task></inner_task>
        <reduction_task><task type="atomic"><description>Merge {{current}}</description></task></reduction_task>
      </task>
    </templates>
    """
)


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "tasks.xml").write_text(TASKS)
    return tmp_path / "templates"


def test_tasks_run_scripted_echoes_each_instruction_in_order(templates: Path) -> None:
    status, text = run_cli("tasks", "run", "report", "--input", "topic=owls", "--scripted", "--trace")
    assert status == 0
    answers = [line for line in text.splitlines() if line.startswith("[scripted]")]
    assert answers == ["[scripted] List facts about owls", "[scripted] Write the report on owls",
                       "[scripted] Write the report on owls"]
    assert (templates.parent / "agentloop-data" / "bot.sqlite3").exists()


def test_tasks_run_a_repeated_input_is_the_list_a_reduce_runs_over(templates: Path) -> None:
    status, text = run_cli("tasks", "run", "total", "--input", "items=one", "--input", "items=two", "--scripted", "--trace", "--data-dir", "d")
    assert status == 0 and text.splitlines()[-1] == "[scripted] Merge [scripted] Summarize two"
    assert "[scripted] Summarize one" in text


def test_parse_inputs() -> None:
    assert parse_inputs(["a=1", "b=x=y", "a=2", "c="]) == {"a": ["1", "2"], "b": "x=y", "c": ""}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--scripted"], "uses {{topic}} but no input 'topic' was given"),
        (["nope", "--scripted"], "no task template named 'nope' is registered (registered: report, total)"),
        (["report", "--input", "topic", "--scripted"], "--input expects NAME=VALUE, got 'topic'"),
        (["report", "--templates", "missing", "--scripted"], "missing does not exist"),
    ],
)
def test_tasks_run_errors_are_one_line(
    templates: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tasks", "run", *argv], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


SCRIPT = '<task name="shout" type="script"><description>Echo</description><command><arg>echo</arg><arg>{{word}}</arg></command></task>'


def test_tasks_run_scripts_only_when_allowed(templates: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (templates.parent / "shout.xml").write_text(SCRIPT)
    argv = ["tasks", "run", "shout", "--templates", "shout.xml", "--input", "word=hey", "--scripted"]
    assert main(argv, io.StringIO()) == 1
    assert "line 1: script task 'shout' is refused" in capsys.readouterr().err
    status, text = run_cli(*argv, "--allow-scripts")
    assert status == 0 and text.splitlines() == ["hey", "", 'notes: {"exit_code": 0, "stderr": ""}']


def agentloop(*argv: str, stdin: str = "", cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `agentloop` console script as a user would."""
    script = shutil.which("agentloop")
    assert script is not None
    environment = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run([script, *argv], input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**environment, **(env or {})})


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def test_chat_talks_to_the_endpoint_and_remembers_the_conversation(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply(body=completion("Hello, Ada."))
    server.reply(body=completion("You said your name is Ada."))
    chat = ("chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data")
    result = agentloop(*chat, stdin="I am Ada\n\nwho am I?\n/quit\nignored\n", cwd=tmp_path,
                       env={"AGENTLOOP_API_KEY": "sk-cli"})
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["bot> Hello, Ada.", "bot> You said your name is Ada."]
    assert len(server.requests) == 2 and server.requests[0]["auth"] == "Bearer sk-cli"
    assert server.requests[0]["body"]["model"] == "tiny"

    server.reply(body=completion("Welcome back."))
    again = agentloop(*chat, stdin="hi again", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-openai"})
    assert again.returncode == 0 and again.stdout == "bot> Welcome back.\n"
    sent = [m["content"] for m in server.requests[2]["body"]["messages"]]
    assert sent[-5:] == ["I am Ada", "Hello, Ada.", "who am I?", "You said your name is Ada.", "hi again"]
    assert server.requests[2]["auth"] == "Bearer sk-openai"


def test_chat_answers_with_the_fallback_and_one_line_when_the_model_fails(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply(400, {"error": "no such model"})
    server.reply(body=completion("Recovered."))
    result = agentloop("chat", "--base-url", server.url, "--data-dir", "data", stdin="one\ntwo\n", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "bot> Sorry, something went wrong while I was answering. Please try again.", "bot> Recovered."
    ]
    assert result.stderr.splitlines() == [
        "agentloop: llm ToolLoopSystem failed: the model server refused the request (HTTP 400): no such model"
    ]


def test_chat_with_a_model_the_server_does_not_list_stops_before_the_first_turn(server: ScriptedServer, tmp_path: Path) -> None:
    """A wrong model name passed the start-up check and failed every turn."""
    server.models = ["llama3.2:latest"]
    result = agentloop("chat", "--base-url", server.url, "--model", "llama3.3", "--data-dir", "data", stdin="hi\n", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "" and server.requests == []
    assert result.stderr.splitlines() == [
        f"agentloop: the model server at {server.url} does not serve a model named 'llama3.3' (it serves: llama3.2:latest); "
        "pass one of those as the model name"
    ]



def test_chat_with_an_unreachable_endpoint_is_one_clear_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = agentloop("chat", "--base-url", url, "--data-dir", "data", stdin="hello\n", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"agentloop: cannot reach the model server at {url} (ConnectError: [Errno 111] Connection refused); "
        "start it or check the base URL"
    ]


def test_tasks_run_on_a_model_server(server: ScriptedServer, templates: Path) -> None:
    server.reply(body=completion("Owls hunt at night."))
    server.reply(body=completion('Owls: nocturnal.\n\n```task-result\n{"notes": {"words": 2}}\n```'))
    result = agentloop("tasks", "run", "report", "--input", "topic=owls", "--base-url", server.url,
                       cwd=templates.parent)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["Owls: nocturnal.", 'notes: {"words": 2}']
    assert "List facts about owls" in server.requests[0]["body"]["messages"][-1]["content"]


@pytest.fixture(scope="module")
def bot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bot's data directory after the demo: one draft note distilled from a session of project travel."""
    data = tmp_path_factory.mktemp("bot") / "data"
    assert main(["demo", "--data-dir", str(data)], io.StringIO()) == 0
    return data


@pytest.fixture
def notes_dir(bot_dir: Path, tmp_path: Path) -> Path:
    """A fresh copy of the demo bot's data, so each test may change its notes."""
    return Path(shutil.copytree(bot_dir, tmp_path / "data"))


TITLE = "Planning a weekend city trip: weather, money and packing"


def test_notes_list_and_show(notes_dir: Path) -> None:
    status, text = run_cli("notes", "list", "--data-dir", str(notes_dir))
    assert status == 0 and text.split() == ["#1", "draft", "pattern", "project", "retrieved", "1", "useful", "1", *TITLE.split()]
    assert run_cli("notes", "list", "--status", "accepted", "--data-dir", str(notes_dir)) == (0, "no notes with status accepted\n")
    status, text = run_cli("notes", "show", "1", "--data-dir", str(notes_dir))
    lines = text.splitlines()
    assert status == 0 and lines[1].startswith("owner: company=default, project=travel; created 2026-01-01")
    assert lines[3] == "## Context" and "- weather -> convert_currency -> packing_list, in that order" in lines


HOSTILE_TITLE = "Trip\x1b]0;pwned\x07\x1b[2J\u202eenil\nfake line"
HOSTILE_MARKDOWN = "## Context\n\tkept tab\r\n\x1b[31mred\x1b[0m \x9b2J and \u2066isolate\u2069"


def _retitle(notes_dir: Path, title: str, markdown: str) -> None:
    """Put `title` and `markdown` on note #1 as a store could hold them (written by a model, or by anyone with the file)."""
    with sqlite3.connect(notes_dir / "bot.notes.sqlite3") as conn:
        conn.execute("UPDATE knowledge_items SET title = ?, markdown = ? WHERE id = 1", (title, markdown))
    conn.close()


def test_notes_list_show_and_search_print_control_characters_from_the_store_escaped(notes_dir: Path) -> None:
    _retitle(notes_dir, HOSTILE_TITLE, HOSTILE_MARKDOWN)
    outputs = [run_cli("notes", "list", "--data-dir", str(notes_dir)), run_cli("notes", "show", "1", "--data-dir", str(notes_dir)),
               run_cli("notes", "search", "weekend trip", "--project", "travel", "--data-dir", str(notes_dir))]
    for status, text in outputs:
        assert status == 0
        assert not any(c in text for c in "\x1b\x07\x9b\r\u202e\u2066\u2069"), text
        assert "Trip\\x1b]0;pwned\\x07\\x1b[2J\\u202eenil\\x0afake line" in text
    shown = outputs[1][1].splitlines()
    assert shown[3:] == ["## Context", "\tkept tab", "\\x1b[31mred\\x1b[0m \\x9b2J and \\u2066isolate\\u2069"]
    assert len(outputs[0][1].splitlines()) == 1, "a newline in a title forged a line of the list"


def test_notes_search_sees_only_the_callers_chain(notes_dir: Path) -> None:
    """I11: the note belongs to project travel; a caller outside that project never sees it."""
    status, text = run_cli("notes", "search", "weekend trip weather", "--project", "travel", "--data-dir", str(notes_dir))
    assert status == 0 and text.startswith("0.") and TITLE in text
    status, text = run_cli("notes", "search", "weekend trip weather", "--project", "other", "--data-dir", str(notes_dir))
    assert (status, text) == (0, "no notes match within project 'other' and its parents\n")
    assert run_cli("notes", "list", "--data-dir", str(notes_dir))[1].split()[5] == "1", "search counts no retrieval"


def test_notes_lifecycle_from_the_command_line(notes_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ("--data-dir", str(notes_dir))
    assert run_cli("notes", "propose", "1", *data) == (0, "note #1: draft -> proposed\n")
    assert run_cli("notes", "accept", "1", *data) == (0, "note #1: proposed -> accepted\n")
    assert main(["notes", "reject", "1", *data], io.StringIO()) == 1
    assert capsys.readouterr().err == (
        "agentloop: note 1 cannot go from accepted to rejected; from accepted it may go to deprecated\n"
    )
    assert run_cli("notes", "deprecate", "1", *data) == (0, "note #1: accepted -> deprecated\n")
    assert main(["notes", "show", "7", *data], io.StringIO()) == 1
    assert capsys.readouterr().err == "agentloop: there is no knowledge item with id 7; it was never stored here\n"


@pytest.mark.parametrize("action", ["show", "propose", "accept"])
def test_a_note_id_too_large_for_sqlite_is_one_line(notes_dir: Path, action: str, capsys: pytest.CaptureFixture[str]) -> None:
    huge = "99999999999999999999"
    assert main(["notes", action, huge, "--data-dir", str(notes_dir)], io.StringIO()) == 1
    assert capsys.readouterr().err == f"agentloop: there is no knowledge item with id {huge}; it was never stored here\n"


def test_notes_merges_lists_similar_accepted_notes(notes_dir: Path) -> None:
    data = ("--data-dir", str(notes_dir))
    assert run_cli("notes", "merges", *data) == (0, "no merge suggestions\n")
    with open_bot(notes_dir, ScriptedLLM(), RecordingChannel()) as bot:
        knowledge = bot.note_taking.knowledge
        first = asyncio.run(knowledge.get(1))
        twin = attrs.evolve(first, id=None, title="Weekend city trips", retrieval_count=0, usefulness_score=0)
        asyncio.run(knowledge.add(twin))
    for note in ("1", "2"):
        run_cli("notes", "propose", note, *data)
        run_cli("notes", "accept", note, *data)
    status, text = run_cli("notes", "merges", *data)
    assert status == 0 and text == f"#1 {TITLE!r} + #2 'Weekend city trips': similarity 1.00\n"


def test_accepting_a_note_without_an_org_after_an_org_note_is_clean(notes_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's note has no org; an accepted org note of the same text is outside its chain."""
    data = ("--data-dir", str(notes_dir))
    with open_bot(notes_dir, ScriptedLLM(), RecordingChannel()) as bot:
        knowledge = bot.note_taking.knowledge
        first = asyncio.run(knowledge.get(1))
        org_note = attrs.evolve(
            first, id=None, layer=Layer.ORG, layer_ids=LayerIds("default", "acme"), title="Acme trips",
            retrieval_count=0, usefulness_score=0,
        )
        asyncio.run(knowledge.add(org_note))
    for note in ("2", "1"):
        assert run_cli("notes", "propose", note, *data)[0] == 0
        assert run_cli("notes", "accept", note, *data) == (0, f"note #{note}: proposed -> accepted\n")
    assert capsys.readouterr().err == ""
    assert run_cli("notes", "merges", *data) == (0, "no merge suggestions\n")


@pytest.mark.parametrize("where", ["the file", "under the file"])
def test_demo_with_a_data_dir_that_is_a_file_is_one_line(tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    data_dir = file if where == "the file" else file / "data"
    assert main(["demo", "--data-dir", str(data_dir)], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentloop: ") and len(err.splitlines()) == 1, err
    assert str(data_dir) in err and file.read_text() == "mine"


@pytest.mark.parametrize("flag", ["--data-dir", "--stores"])
def test_notes_on_a_directory_without_notes_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    where = str(tmp_path / "nowhere") if flag == "--data-dir" else f"sqlite:///{tmp_path / 'nowhere'}"
    assert main(["notes", "list", flag, where], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"agentloop: cannot open the stores at {where}: the bot 'bot' has no stores there yet; run the bot first")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(("where", "message"), [
    ("postgresql://127.0.0.1:1/bots", "the server cannot be reached"),
    ("redis://cache/0", "no backend opens 'redis' URLs"),
    ("sqlite:///{file}", "is a file, not a directory"),
])
def test_stores_no_backend_can_open_are_one_line(
    templates: Path, capsys: pytest.CaptureFixture[str], where: str, message: str
) -> None:
    file = templates.parent / "notes.txt"
    file.write_text("mine")
    assert main(["tasks", "run", "report", "--input", "topic=owls", "--scripted", "--stores", where.format(file=file)], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentloop: cannot open the stores at ") and message in err and len(err.splitlines()) == 1, err
    assert file.read_text() == "mine"


def test_tasks_run_keeps_the_bot_at_its_stores_url(templates: Path) -> None:
    status, _ = run_cli("tasks", "run", "report", "--input", "topic=owls", "--scripted", "--stores", "sqlite:///bots", "--bot", "helper")
    assert status == 0 and (templates.parent / "bots" / "helper.sqlite3").exists()
    assert not (templates.parent / "agentloop-data").exists()


def test_data_dir_and_stores_are_one_choice(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["notes", "list", "--data-dir", "a", "--stores", "sqlite:///b"], io.StringIO())
    assert exit.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [[], ["demo"], ["chat"], ["pipeline", "show"], ["templates", "validate"], ["tasks", "run"],
     *(["notes", action] for action in ("list", "show", "search", "propose", "accept", "reject", "deprecate", "merges")),
     ["stores", "migrate"], ["worker"]],
    ids=lambda command: " ".join(command) or "agentloop",
)
def test_every_command_documents_its_exit_status(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0 and "exit status: 0" in " ".join(capsys.readouterr().out.split())


def test_tasks_run_refuses_a_malformed_template_with_file_and_line(templates: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (templates / "broken.xml").write_text(MALFORMED)
    assert main(["tasks", "run", "report", "--input", "topic=owls", "--scripted"], io.StringIO()) == 1
    assert capsys.readouterr().err.startswith("agentloop: template templates/broken.xml line 3: is not well-formed XML")
    assert not (templates.parent / "agentloop-data").exists(), "nothing runs when a template does not load"


def test_stores_migrate_opens_and_closes_a_sqlite_bot(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["stores", "migrate", f"sqlite:///{tmp_path}/data", "--bot", "helper"], out) == 0
    assert out.getvalue() == f"stores of bot 'helper' at sqlite:///{tmp_path}/data: up to date\n"
    assert (tmp_path / "data" / "helper.sqlite3").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--data-dir", "data"], "the inbox lives in PostgreSQL: give --inbox postgresql://"),
    (["--inbox", "postgresql://me@/db?host=/nowhere", "--concurrency", "0"], "bad worker setting: 'concurrency' must be >= 1"),
    (["--inbox", "postgresql://me@/db?host=/nowhere", "--pipeline", "no_such_module_xyz:f"], "cannot import 'no_such_module_xyz'"),
    (["--inbox", "postgresql://me:secret@/db?host=/nowhere"], "cannot open the inbox at postgresql://me:***@/db"),
    (["--inbox", "postgresql://me@/db?host=/nowhere", "--idle-end", "0"], "--idle-end must be a positive number of seconds, not 0"),
    (["--inbox", "postgresql://me@/db?host=/nowhere", "--idle-end", "600"], ":for_worker has none; plug it in with systems.add_note_taking"),
])
def test_worker_problems_are_one_line(
    user_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    pipeline = [] if "--pipeline" in argv else ["--pipeline", f"{user_module}:for_worker"]
    data = [] if "--data-dir" in argv else ["--data-dir", str(tmp_path / "data")]
    assert main(["worker", *data, *pipeline, *argv], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentloop: ") and message in err and len(err.splitlines()) == 1, err


def test_stores_migrate_a_postgresql_bot_creates_its_stores_and_its_inbox(postgres_url: str) -> None:
    out = io.StringIO()
    assert main(["stores", "migrate", postgres_url, "--bot", "helper"], out) == 0
    shown = shown_url(postgres_url)
    assert out.getvalue().splitlines() == [
        f"stores of bot 'helper' at {shown}: up to date", f"inbox at {shown}: up to date (schema version 3)"
    ]
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute(
            "SELECT to_regclass('agentloop_inbox') IS NOT NULL, to_regclass('procrastinate_jobs') IS NOT NULL, "
            "to_regnamespace('agentloop_helper') IS NOT NULL"
        ).fetchone()
    assert found == (True, True, True)


def test_a_store_failing_mid_command_is_one_line(postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stores", "migrate", postgres_url, "--bot", "helper"], io.StringIO()) == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the notes are lost under the bot
        conn.execute("DROP TABLE agentloop_helper.knowledge_items CASCADE")
    assert main(["notes", "list", "--stores", postgres_url, "--bot", "helper"], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"agentloop: the PostgreSQL stores of {shown_url(postgres_url)} (schema agentloop_helper) failed: ")
    assert "knowledge_items" in err and err.count("\n") == 1


def test_the_demo_runs_on_postgresql_stores_and_refuses_a_bot_already_there(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    assert main(["demo", "--stores", postgres_url], out) == 0
    assert f"data: {shown_url(postgres_url)}\n" in out.getvalue() and "demo ok: 37 checks held" in out.getvalue()
    capsys.readouterr()
    assert main(["demo", "--stores", postgres_url], io.StringIO()) == 1
    assert capsys.readouterr().err == (
        f"agentloop: the bot 'bot' already has stores at {shown_url(postgres_url)}; the demo's story starts from a new bot, "
        "so give --stores a place with no bot named 'bot' (a new database or directory)\n"
    )


def test_the_demo_on_a_sqlite_stores_url_refuses_a_bot_already_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--stores", f"sqlite:///{tmp_path}"], io.StringIO()) == 0
    assert main(["demo", "--stores", f"sqlite:///{tmp_path}"], io.StringIO()) == 1
    assert "the bot 'bot' already has stores at sqlite:///" in capsys.readouterr().err


def test_the_demo_on_a_postgresql_server_that_does_not_answer_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--stores", "postgresql://ada:secret@127.0.0.1:1/bots"], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentloop: cannot open the stores at postgresql://ada:***@127.0.0.1:1/bots: the server cannot be reached")
    assert err.count("\n") == 1 and "secret" not in err


USER_TOOLS = textwrap.dedent(
    """
    from agentloop import tool
    from systems import standard_pipeline


    @tool
    def weather(city: str) -> str:
        \"\"\"Today's weather in a city.\"\"\"
        return f"sunny and 24 C in {city}"


    def factory(llm, channel, stores):
        return standard_pipeline(llm, channel, stores=stores, tools=[weather])
    """
)


def spawn_chat(server: ScriptedServer, cwd: Path, *argv: str) -> pexpect.spawn:
    """`agentloop chat` on `server` in a pseudo-terminal, as a user at a terminal runs it."""
    script = shutil.which("agentloop")
    assert script is not None
    environment = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    argv = ("chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data", *argv)
    return pexpect.spawn(script, list(argv), cwd=str(cwd), env=environment, encoding="utf-8", timeout=10)


def test_chat_prints_the_answer_while_the_model_is_still_writing_it(server: ScriptedServer, tmp_path: Path) -> None:
    """A user waited in silence for the whole reply; now its first tokens show while the rest is on its way."""
    answer = "Lisbon is lovely in spring, mild and bright."
    server.stream(streamed_completion(answer, size=4), delay=0.3, pause=0.15)
    chat = spawn_chat(server, tmp_path)
    chat.expect_exact("you> ")
    chat.sendline("where should I go?")
    chat.expect_exact("waiting for the model")
    chat.expect_exact("bot> Lisb")
    first_token = time.monotonic()
    chat.expect_exact("bright.")
    assert time.monotonic() - first_token > 1.0, "the whole answer arrived at once"
    chat.expect_exact("you> ")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def test_ctrl_c_at_the_prompt_exits_130_at_once(server: ScriptedServer, tmp_path: Path) -> None:
    """Ctrl-C at an idle prompt did nothing until Enter."""
    chat = spawn_chat(server, tmp_path)
    chat.expect_exact("you> ")
    chat.sendintr()
    chat.expect(pexpect.EOF, timeout=5)
    chat.close()
    assert chat.exitstatus == 130 and server.requests == []


def test_ctrl_c_during_a_turn_cancels_it_and_the_prompt_comes_back(server: ScriptedServer, tmp_path: Path) -> None:
    server.stream(streamed_completion("too late"), delay=1.5)
    server.reply(body=completion("Here now."))
    chat = spawn_chat(server, tmp_path)
    chat.expect_exact("you> ")
    chat.sendline("slow one")
    chat.expect_exact("waiting for the model")
    asked = time.monotonic() + 10
    while not server.requests and time.monotonic() < asked:
        time.sleep(0.02)
    chat.sendintr()
    chat.expect_exact("agentloop: turn cancelled")
    chat.expect_exact("you> ")
    chat.sendline("again")
    chat.expect_exact("bot> Here now.")
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0 and "too late" not in (chat.before or "")
    assert "slow one" not in [message["content"] for message in server.requests[1]["body"]["messages"]]


@pytest.mark.parametrize("option", [["--pipeline", "my_tools:factory"], ["--tools", "my_tools"]])
def test_chat_runs_the_users_tool_from_their_module(server: ScriptedServer, tmp_path: Path, option: list[str]) -> None:
    """chat knew only the standard tools: `there is no tool named 'weather'`."""
    (tmp_path / "my_tools.py").write_text(USER_TOOLS)
    server.stream(streamed_completion(tool_calls=[("call_1", "weather", '{"city": "Lisbon"}')]))
    server.stream(streamed_completion("Sunny and 24 C in Lisbon today."))
    chat = spawn_chat(server, tmp_path, *option)
    chat.expect_exact("you> ")
    chat.sendline("weather in Lisbon?")
    chat.expect_exact("bot> Sunny and 24 C in Lisbon today.")
    chat.expect_exact("you> ")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    assert "weather" in [tool["function"]["name"] for tool in server.requests[0]["body"]["tools"]]
    tool_message = server.requests[1]["body"]["messages"][-1]
    assert tool_message["role"] == "tool" and "sunny and 24 C in Lisbon" in tool_message["content"]


def test_good_records_feedback_and_ctrl_d_ends_the_session_on_a_new_line(server: ScriptedServer, tmp_path: Path) -> None:
    server.stream(streamed_completion("Hello."))
    chat = spawn_chat(server, tmp_path)
    chat.expect_exact("you> ")
    chat.sendline("/good")
    chat.expect_exact("agentloop: nothing to rate yet")
    chat.sendline("hi")
    chat.expect_exact("bot> Hello.")
    chat.expect_exact("you> ")
    chat.sendline("/good")
    chat.expect_exact("agentloop: feedback recorded (good)")
    chat.expect_exact("you> ")
    chat.sendeof()
    chat.expect_exact("\r\nagentloop: session 'console' ended; distillation skipped")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0 and len(server.requests) == 1


def test_good_credits_the_notes_of_the_last_answer_and_bye_ends_the_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """/good credited every note the session had seen; /bye was sent to the model as a message."""
    llm = ScriptedLLM(["Page through it.", "Restore one to check it.", "never asked"])
    with open_bot(tmp_path, llm, RecordingChannel()) as bot:
        knowledge = bot.note_taking.knowledge
        session = Session("console", user_id="ada")
        keys = {}
        for text in ("page through rate-limited APIs", "verify backups by restoring them"):
            item = KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, bot.note_taking.chain(session), text, text,
                                 knowledge.embed(text), FakeClock().now())
            keys[text] = asyncio.run(knowledge.add(item)).key
        chat = Chat(bot.loop, bot.note_taking, session)
        lines = "how do I page rate-limited APIs?\nhow do I verify backups by restoring them?\n/good\n/bye\nignored\n"
        assert converse(chat, io.StringIO(lines)) == 0
        useful = {text: asyncio.run(knowledge.get(key)).usefulness_score for text, key in keys.items()}
    assert useful == {"page through rate-limited APIs": 0, "verify backups by restoring them": 1}
    assert len(llm.requests) == 2
    err = capsys.readouterr().err
    assert f"credited note(s) #{keys['verify backups by restoring them']}" in err
    assert "agentloop: session 'console' ended; distillation skipped" in err


def test_chat_ends_a_pipelines_session_through_that_pipelines_note_taking(server: ScriptedServer, tmp_path: Path) -> None:
    """chat ended the session through note-taking of its own, which had captured nothing: 0 tool executions."""
    for page in (1, 2):
        server.stream(streamed_completion(tool_calls=[(f"call_{page}", "fetch_page", f'{{"page": {page}}}')]))
    server.stream(streamed_completion(tool_calls=[("call_3", "count_rows", "{}")]))
    server.stream(streamed_completion("Export done: 1000 rows."))
    server.reply(body=completion(NOTE))
    tests = Path(__file__).resolve().parents[2]
    result = agentloop(
        "chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data", "--pipeline", "learning_kit:export_bot",
        stdin="Run the nightly export of the orders table\n/bye\n", cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 0 and result.stdout == "bot> Export done: 1000 rows.\n", result.stderr
    assert "agentloop: session 'console' ended; distillation stored" in result.stderr


def test_chat_with_a_timeout_answers_a_slow_model_with_the_deadline_fallback(server: ScriptedServer, tmp_path: Path) -> None:
    """With a slow server chat was silent for minutes; --timeout bounds the turn."""
    server.stream(streamed_completion("far too late"), delay=1.5)
    started = time.monotonic()
    result = agentloop("chat", "--base-url", server.url, "--data-dir", "data", "--timeout", "0.5", stdin="hello\n", cwd=tmp_path)
    assert result.returncode == 0 and time.monotonic() - started < 10
    assert result.stdout.splitlines() == ["bot> I ran out of time before finishing. Please try again."]


def test_chat_on_the_anthropic_messages_api(server: ScriptedServer, tmp_path: Path) -> None:
    queue_stream(server, message_events("Hello from Claude."))
    result = agentloop("chat", "--provider", "anthropic", "--base-url", server.url, "--model", "claude-x",
                       "--data-dir", "data", stdin="hi\n", cwd=tmp_path, env={"ANTHROPIC_API_KEY": "sk-ant"})
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "bot> Hello from Claude.\n"
    assert server.requests[0]["path"] == "/v1/messages" and server.headers[0]["x-api-key"] == "sk-ant"
    assert server.requests[0]["body"]["model"] == "claude-x"


@pytest.mark.parametrize(("argv", "message"), [
    (["--pipeline", "my_tools:factory", "--tools", "my_tools"], "not allowed with argument"),
    (["--timeout", "0"], "expected a positive number of seconds"),
])
def test_chat_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["chat", *argv])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_chat_tools_from_a_module_without_tools_is_one_line(server: ScriptedServer, tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("x = 1\n")
    result = agentloop("chat", "--base-url", server.url, "--data-dir", "data", "--tools", "plain", stdin="hi\n", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == "agentloop: 'plain' defines no tools; decorate its functions with @agentloop.tool\n"


APPROVED_TOOLS = textwrap.dedent(
    """
    from pathlib import Path

    from agentloop import tool


    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        \"\"\"Delete a file for good.\"\"\"
        Path(path).unlink()
        return f"deleted {path}"
    """
)


def test_chat_asks_before_a_tool_that_needs_approval_and_approve_runs_it_in_a_later_chat(
    server: ScriptedServer, tmp_path: Path
) -> None:
    (tmp_path / "risky.py").write_text(APPROVED_TOOLS)
    (tmp_path / "a.txt").write_text("precious")
    server.stream(streamed_completion(tool_calls=[("call_1", "delete_file", '{"path": "a.txt"}')]))
    chat = ("chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data", "--tools", "risky")
    env = {"AGENTLOOP_API_KEY": "sk-cli"}
    asked = agentloop(*chat, stdin="/approve\ndelete a.txt\n", cwd=tmp_path, env=env)
    assert asked.returncode == 0 and (tmp_path / "a.txt").exists()
    assert asked.stdout == "bot> Before I run delete_file(path='a.txt'), I need your approval: approve or deny it.\n"
    assert asked.stderr.splitlines()[0] == "agentloop: no tool call awaits your approval in this session"

    server.stream(streamed_completion("Deleted a.txt."))
    approved = agentloop(*chat, stdin="/approve\n/approve\n", cwd=tmp_path, env=env)
    assert approved.returncode == 0 and not (tmp_path / "a.txt").exists()
    assert approved.stdout == "bot> Deleted a.txt.\n"
    assert "agentloop: no tool call awaits your approval in this session" in approved.stderr
    tool_message = server.requests[1]["body"]["messages"][-1]
    assert (tool_message["role"], tool_message["content"]) == ("tool", "deleted a.txt")


@pytest.mark.parametrize("url", [
    "postgresql://agent:secret@127.0.0.1:1/db", "postgresql://agent:secret@127.0.0.1:1/db?sslmode=disable",
    "postgresql://127.0.0.1:1/db?user=agent&password=secret", "host=127.0.0.1 port=1 user=agent password=secret",
    "host=127.0.0.1 port=1 password='se cret'",
])
@pytest.mark.parametrize("command", [["notes", "list", "--stores"], ["stores", "migrate"]])
def test_a_postgresql_password_never_reaches_the_output_or_the_log(
    url: str, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    status = main(["--log-level", "DEBUG", *command, url], out)
    err = capsys.readouterr()
    printed = out.getvalue() + err.out + err.err
    assert status == 1 and printed
    assert "secret" not in printed and "cret" not in printed, printed
    assert list(tmp_path.iterdir()) == [], "a connection string was taken for a directory"


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:secret@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:p@ss@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql://h/db?user=u&password=secret&sslmode=require", "postgresql://h/db?user=u&password=***&sslmode=require"),
    ("host=h password=secret dbname=x", "host=h password=*** dbname=x"),
    ("host=h PASSWORD = 'se cr\\'et' user=u sslpassword=key", "host=h PASSWORD = *** user=u sslpassword=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
])
def test_shown_url_hides_the_password_of_a_url_or_a_key_value_connection_string(url: str, shown: str) -> None:
    assert shown_url(url) == shown


FAILING_TOOLS = textwrap.dedent(
    """
    from agentloop import tool


    @tool
    def weather(city: str) -> str:
        \"\"\"Today's weather in a city.\"\"\"
        raise RuntimeError("the weather service is down")
    """
)


def test_a_failing_tool_is_one_line_in_the_chat_and_its_traceback_shows_with_verbose(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """A tool that raised printed a 10-line traceback into the conversation."""
    (tmp_path / "flaky_tools.py").write_text(FAILING_TOOLS)
    chat = ("chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data", "--tools", "flaky_tools")
    failure = "agentloop: tool weather failed: RuntimeError: the weather service is down"
    for _ in range(2):
        server.stream(streamed_completion(tool_calls=[("call_1", "weather", '{"city": "Lisbon"}')]))
        server.stream(streamed_completion("The weather service is down."))
    quiet = agentloop(*chat, stdin="weather in Lisbon?\n", cwd=tmp_path)
    assert (quiet.returncode, quiet.stdout) == (0, "bot> The weather service is down.\n")
    assert quiet.stderr.splitlines() == [failure]
    verbose = agentloop(*chat, "--verbose", stdin="weather in Lisbon?\n", cwd=tmp_path)
    assert verbose.returncode == 0 and verbose.stderr.splitlines()[-1] == failure
    assert "Traceback (most recent call last):" in verbose.stderr and 'raise RuntimeError("the weather service is down")' in verbose.stderr


def test_a_log_line_while_the_spinner_turns_clears_its_line_and_the_spinner_comes_back_below(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """`llm.retry` warnings were written onto the spinner's line and wrapped over it."""
    server.reply(503, {"error": "overloaded"})
    server.stream(streamed_completion("Here now."))
    chat = spawn_chat(server, tmp_path)
    chat.expect_exact("you> ")
    chat.sendline("hello")
    chat.expect_exact("bot> Here now.")
    shown = (chat.before or "") + (chat.after or "")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0 and len(server.requests) == 2
    (retry,) = [line for line in shown.split("\n") if "llm.retry" in line]
    _, cleared, visible = retry.rpartition("\r\x1b[K")  # what the terminal shows of that line
    assert cleared and visible.startswith("20") and "llm.retry" in visible, f"a log line shares the spinner's line: {retry!r}"
    assert "waiting for the model" not in visible and "\r" not in visible.rstrip("\r")
    assert "waiting for the model" in shown.split(retry, 1)[1], "the spinner did not come back after the log line"


def test_without_verbose_an_exception_outside_a_turn_is_named_on_its_log_line_without_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only a turn's failures are left to the conversation; another event keeps one line that names its error."""
    before = structlog.get_config()
    try:
        _log_to_console("WARNING", None, verbose=False)
        try:
            raise OSError("disk full")
        except OSError as error:
            structlog.get_logger().warning("notes.idle_sessions.failed", exc_info=error)
            structlog.get_logger().error("system.failed", turn_id="t1", exc_info=error)
    finally:
        structlog.configure(**before)
    (line,) = capsys.readouterr().err.splitlines()
    assert "notes.idle_sessions.failed" in line and "error='OSError: disk full'" in line


def test_chat_that_cannot_open_a_postgresql_bot_names_its_url_without_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import ExitStack

    import agentloop.cli.chat as chat
    from agentloop.bots import BotSettings
    from agentloop.cli import CliError

    def refused(url: str, **kwargs: object) -> None:
        raise OSError(f"connection to {url} refused")

    monkeypatch.setattr(chat, "open_stores", refused)
    where = BotSettings(stores="postgresql://ada:s3cret@127.0.0.1:1/bots", bot="helper")
    with ExitStack() as stack, pytest.raises(CliError) as raised:
        chat._user_bot(stack, where, "serve_kit:echo_bot", ScriptedLLM([]), RecordingChannel())
    assert "s3cret" not in str(raised.value)
    assert "postgresql://ada:***@127.0.0.1:1/bots" in str(raised.value)
