"""The learning curve (agentloop.evals.learning), measured through the shipped example bot."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lxml.html
import pytest
from matplotlib import image

from agentloop import AgentLoop
from agentloop.adapters import Stores, open_note_taking
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.cli import main
from agentloop.evals.learning import (
    LearningDataset,
    LearningDatasetError,
    LearningReport,
    LearningRunError,
    PriceSpecError,
    SuccessCriteria,
    parse_price,
    run_learning,
)
from agentloop.notes import DistillationSettings
from agentloop.ports import LLM, Channel
from agentloop.pricing import ModelPrice, Prices
from systems import StandardPipeline, add_note_taking, standard_pipeline

ROOT = Path(__file__).resolve().parents[3]
DATASET = ROOT / "examples" / "learning" / "dataset.yaml"
EXAMPLE = "examples.learning.bot:learning_bot"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report() -> Iterator[LearningReport]:
    """The example dataset run once with the example bot, priced so cost is known."""
    sys.path.insert(0, str(ROOT))
    try:
        prices = Prices({"scripted-learner": ModelPrice(0.15, 0.6)})
        yield asyncio.run(run_learning(LearningDataset.load(DATASET), EXAMPLE, prices=prices))
    finally:
        sys.path.remove(str(ROOT))


def test_later_sessions_with_notes_call_the_model_and_tools_less_than_without(report: LearningReport) -> None:
    with_notes, without = report.curve(note_taking=True), report.curve(note_taking=False)
    assert [p.index for p in with_notes] == [p.index for p in without] and len(with_notes) > 1
    first_on, first_off = with_notes[0], without[0]
    assert (first_on.llm_calls, first_on.tool_calls) == (first_off.llm_calls, first_off.tool_calls)
    for on, off in zip(with_notes[1:], without[1:]):
        assert on.llm_calls < off.llm_calls and on.tool_calls < off.tool_calls and on.tokens < off.tokens
        assert on.success_rate >= off.success_rate


def test_each_family_distils_its_first_session_and_later_sessions_are_shown_that_note(report: LearningReport) -> None:
    for family in {s.family for s in report.sessions}:
        runs = sorted((s for s in report.runs(note_taking=True) if s.family == family), key=lambda s: s.index)
        assert runs[0].notes_shown == () and runs[0].distillation == "stored"
        assert all(len(s.notes_shown) == 1 and s.notes_shown == runs[1].notes_shown for s in runs[1:])
        assert all(s.tools == (runs[0].tools[-1],) for s in runs[1:])  # the note named the tool that did it
    assert all(s.notes_shown == () and s.distillation is None for s in report.runs(note_taking=False))


def test_every_session_records_its_calls_tokens_and_priced_cost(report: LearningReport) -> None:
    assert report.sessions and all(s.success and not s.unmet for s in report.sessions)
    for session in report.sessions:
        assert session.llm_calls == session.tool_calls + 1  # the example answers after its last tool call
        assert session.input_tokens > 0 and session.output_tokens > 0
        assert session.cost is not None and session.cost > 0


def test_the_factory_is_offered_the_model_given_and_every_call_of_it_is_counted() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from examples.learning import bot
    finally:
        sys.path.remove(str(ROOT))
    model = ScriptedLLM(bot.reply, model=bot.MODEL)

    def factory(llm: LLM, channel: Channel, stores: Stores) -> StandardPipeline:
        notes = open_note_taking(stores, llm, distillation=DistillationSettings(min_duration_s=0))
        return add_note_taking(standard_pipeline(llm, channel, stores=stores, tools=bot.TOOLS), notes)

    dataset = LearningDataset.from_yaml("families: [{name: exports, sessions: [Export the orders table, Export the orders table]}]")
    report = asyncio.run(run_learning(dataset, factory, llm=model))
    distilled = sum(s.distillation in ("stored", "duplicate") for s in report.sessions)
    assert distilled >= 1 and len(model.requests) == sum(s.llm_calls for s in report.sessions) + distilled


def test_the_report_round_trips_through_json(report: LearningReport) -> None:
    assert LearningReport.from_json(report.to_json()) == report


def test_the_plot_is_a_png_that_decodes(report: LearningReport) -> None:
    png = report.png()
    assert png.startswith(PNG_SIGNATURE)
    pixels = image.imread(io.BytesIO(png), format="png")
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def test_the_html_fragment_inlines_the_plot_and_tabulates_each_session_index_and_session(report: LearningReport) -> None:
    fragment = lxml.html.fragment_fromstring(report.html())
    source = fragment.xpath("//img/@src")[0]
    assert source.startswith("data:image/png;base64,")
    assert base64.b64decode(source.partition(",")[2]).startswith(PNG_SIGNATURE)
    points = fragment.xpath("//table[@class='learning-curve-points']//tr[td]")
    assert [row.xpath("td")[0].text for row in points] == [str(p.index) for p in report.curve(note_taking=True)]
    assert len(fragment.xpath("//table[@class='learning-sessions']//tr[td]")) == len(report.sessions)


def test_agentloop_eval_learning_prints_both_curves_and_writes_json_png_and_html(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "agentloop.cli", "eval", "--learning", str(DATASET), "--pipeline", EXAMPLE, "--out", str(out),
         "--price", "scripted-learner=0.15,0.6"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "with note-taking" in result.stdout and "without note-taking" in result.stdout
    written = LearningReport.from_json((out / "learning.json").read_text())
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [row[0] for row in rows] == [str(p.index) for p in written.curve(note_taking=True)]
    told = result.stderr.splitlines()
    assert len(told) == len(written.sessions) and told[0].startswith("exports 1 with notes: success")
    assert (out / "learning.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "data:image/png;base64," in (out / "learning.html").read_text()


def test_the_command_says_in_one_line_what_is_wrong_with_a_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("families: []\n")
    from agentloop.cli import main

    status = main(["eval", "--learning", str(broken), "--pipeline", EXAMPLE, "--out", str(tmp_path / "out")], io.StringIO())
    errors = capsys.readouterr().err
    assert status == 1 and errors.count("\n") == 1 and "non-empty list under 'families'" in errors
    assert not (tmp_path / "out").exists()


def test_a_pipeline_without_note_taking_is_refused_saying_how_to_add_it() -> None:
    dataset = LearningDataset.from_yaml("families: [{name: chat, sessions: [hello]}]")

    def bare() -> AgentLoop:
        return AgentLoop([])

    with pytest.raises(LearningRunError, match="add_note_taking"):
        asyncio.run(run_learning(dataset, bare, llm=ScriptedLLM(["hi"])))


def test_a_family_success_applies_to_its_sessions_unless_a_session_says_otherwise() -> None:
    dataset = LearningDataset.from_yaml(
        "families:\n"
        "  - name: export\n"
        "    success: {tools_called: [export_table]}\n"
        "    sessions:\n"
        "      - Export the orders table\n"
        "      - {messages: [Hi, Export the customers table], success: {answer_contains: [done]}}\n",
        name="file",
    )
    first, second = dataset.families[0].sessions
    assert dataset.name == "file" and first.messages == ("Export the orders table",)
    assert first.success == SuccessCriteria(tools_called=("export_table",))
    assert second.messages == ("Hi", "Export the customers table") and second.success == SuccessCriteria(("done",))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("families: [{name: a}]", "families[0] needs a 'name' and a list of 'sessions'"),
        ("families: [{name: a, sessions: []}]", "has no sessions"),
        ("families: [{name: a, sessions: [hi]}, {name: a, sessions: [hi]}]", "family names must be unique"),
        ("families: [{name: a, sessions: [{success: {}}]}]", "sessions[0] needs 'messages'"),
        ("families: [{name: a, sessions: [{messages: [1]}]}]", "messages must be a string or a list of strings"),
        ("families: [{name: a, success: {answer_is: x}, sessions: [hi]}]", "unknown keys ['answer_is']"),
        ("families: [{name: a, success: {answer_matches: '('}, sessions: [hi]}]", "not a regular expression"),
        ("families: [", "not valid YAML"),
    ],
)
def test_a_dataset_entry_that_cannot_be_read_is_refused_saying_where_and_why(text: str, says: str) -> None:
    with pytest.raises(LearningDatasetError) as refused:
        LearningDataset.from_yaml(text)
    assert says in str(refused.value) and isinstance(refused.value, ValueError)


def test_success_needs_every_criterion_given_and_says_which_failed() -> None:
    criteria = SuccessCriteria(("Exported",), r"\d+ rows", ("export_table",))
    assert criteria.unmet("exported orders: 1200 rows", ["search_docs", "export_table"]) == ()
    assert criteria.unmet("no luck", ["search_docs"]) == (
        "the answer does not contain 'Exported'", "the answer does not match '\\\\d+ rows'", "export_table was not called",
    )
    assert SuccessCriteria().unmet("", []) == ()


def test_agentloop_eval_learning_without_a_pipeline_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    from agentloop.cli import main

    status = main(["eval", "--learning", str(DATASET)])
    errors = capsys.readouterr().err
    assert status == 1 and "--learning needs --pipeline MODULE:FACTORY" in errors and errors.count("\n") == 1


@pytest.mark.parametrize("given", ["gpt-4o", "=1,2", "gpt-4o=1", "gpt-4o=one,two"])
def test_a_price_that_does_not_read_is_one_line_from_the_command(given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`parse_price` raises a `PriceSpecError`, which the CLI's one handler prints."""
    with pytest.raises(PriceSpecError, match="MODEL=INPUT,OUTPUT"):
        parse_price(given)
    assert main(["eval", "--learning", str(DATASET), "--pipeline", EXAMPLE, "--price", given], io.StringIO()) == 1
    assert capsys.readouterr().err == (
        f"agentloop: --price {given!r}: expected MODEL=INPUT,OUTPUT in dollars per million tokens, as in gpt-4o=2.50,10.00\n"
    )
