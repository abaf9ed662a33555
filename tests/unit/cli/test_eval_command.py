"""`agentloop eval` end to end: the standard bot talking over loopback HTTP to a model server speaking the
OpenAI wire format, the LLM judge on the same server, the reports it writes; and its usage errors."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.cli import main
from agentloop.evals import read_report
from agentloop.testing.http import ScriptedServer
from eval_kit import eval_over_http


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def test_eval_over_http_reports_each_case_with_the_tokens_the_server_counted(server: ScriptedServer, tmp_path: Path) -> None:
    ran = eval_over_http(server, tmp_path)
    assert ran.status == 0, ran.stderr
    report = read_report(ran.json_report)
    greets, refunds = report.runs
    assert (greets.case, greets.passed, refunds.case, refunds.passed) == ("greets", True, "refunds", False)
    assert {c.name: c.passed for c in greets.checks} == {
        "answer": True, "finish_reason": True, "budget": True, "judge: is friendly": True,
    }
    assert (greets.tokens, greets.llm_calls, refunds.tokens) == (47, 1, 46)
    assert greets.cost is None  # the served model has no known price: unknown, never zero
    assert "'I cannot do that.' does not contain 'refunded'" in [c.reason for c in refunds.checks]
    assert "pass rate 50%" in ran.stdout and "Evaluation Summary: support" in ran.stdout
    assert len(server.requests) == 3 and server.requests[1]["body"]["messages"][0]["content"].startswith("You judge")
    assert "is friendly" in server.requests[1]["body"]["messages"][1]["content"]


def test_each_case_runs_in_a_tenant_chain_of_its_own(server: ScriptedServer, tmp_path: Path) -> None:
    ran = eval_over_http(server, tmp_path)
    assert ran.status == 0, ran.stderr
    second_case = server.requests[2]["body"]["messages"]
    said = [message["content"] for message in second_case if message["role"] in ("user", "assistant")]
    assert said == ["Please refund order A-17"], f"the first case's conversation reached the second: {said}"


def test_schema_prints_the_json_schema_of_a_dataset() -> None:
    out = io.StringIO()
    assert main(["eval", "--schema"], out=out) == 0
    schema = json.loads(out.getvalue())
    assert schema["title"] == "agentloop eval dataset" and "EvalCase" in schema["$defs"]


def test_a_dataset_that_breaks_the_schema_is_one_line_naming_the_case_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ncases:\n  - name: greets\n    messages: [hi]\n    expect: {finish_reason: done}\n")
    assert main(["eval", str(broken), "--pipeline", "eval_kit:knowing_bot"]) == 1
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"agentloop: {broken}: case 'greets'.expect.finish_reason:") and "\n" not in said


def test_fail_under_fails_the_command_when_the_pass_rate_is_lower(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = Path(__file__).parents[2] / "features" / "evals" / "greetings.yaml"
    assert main(["eval", str(dataset), "--pipeline", "eval_kit:unsure_bot", "--fail-under", "0.9"], out=io.StringIO()) == 1
    assert "the pass rate 50% is below --fail-under 90%" in capsys.readouterr().err
