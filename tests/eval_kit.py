"""For the tests of `agentloop eval`: bots it evaluates with `--pipeline eval_kit:...` (one that knows the
capital of France and one that does not, on a scripted model), and its end-to-end run against a model
server speaking the OpenAI wire format on a loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs

from agentloop import LlmRequest
from agentloop.ports import Channel, Stores
from agentloop.testing import ScriptedLLM
from agentloop.testing.http import ScriptedServer, completion, streamed_completion, usage_body
from systems import StandardPipeline, standard_pipeline


def _answers(knows: bool) -> ScriptedLLM:
    def answer(request: LlmRequest) -> str:
        said = request.messages[-1].content or ""
        if "capital" in said:
            return "Paris." if knows else "I am not sure."
        return "Hello! How can I help?"

    return ScriptedLLM(answer)


def knowing_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    return standard_pipeline(_answers(True), channel, stores=stores)


def unsure_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    return standard_pipeline(_answers(False), channel, stores=stores)


DATASET = Path(__file__).parent / "fixtures" / "evals" / "support.yaml"


@attrs.frozen
class EvalOverHttp:
    """What `agentloop eval` did against the model server: its exit status, output, and reports."""

    status: int
    stdout: str
    stderr: str
    json_report: Path
    html_report: Path


def eval_over_http(server: ScriptedServer, workdir: Path) -> EvalOverHttp:
    """Run `agentloop eval` on `support.yaml` in a process of its own, the standard bot talking to `server`
    (an OpenAI-compatible model server on a loopback port): the first case's answer, the judge's verdict
    on it, then the second case's answer, which misses what its case expects."""
    server.stream(streamed_completion("Hello! How can I help?", usage=(40, 7)))
    server.reply(body={**completion('{"pass": true, "reason": "it greets warmly"}'), "usage": usage_body(90, 12)})
    server.stream(streamed_completion("I cannot do that.", usage=(41, 5)))
    json_report, html_report = workdir / "report.json", workdir / "report.html"
    argv = [
        sys.executable, "-m", "agentloop.cli", "eval", str(DATASET), "--base-url", server.url, "--model", "served-model",
        "--concurrency", "1", "--json", str(json_report), "--html", str(html_report),
    ]
    environment = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    done = subprocess.run(argv, cwd=workdir, env=environment, capture_output=True, text=True, timeout=120)
    return EvalOverHttp(done.returncode, done.stdout, done.stderr, json_report, html_report)
