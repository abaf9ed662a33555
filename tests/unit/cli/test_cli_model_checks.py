"""The start-up check of `agentloop chat`, `serve` and `worker`, and `--fallback-model`, run as a user runs them."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop import ContextBudget, EstimatedTokens, IncomingMessage, Session
from agentloop.adapters.llm.openai import OpenAICompatibleLLM
from agentloop.bots import ModelSettings, check_models, open_bot
from agentloop.testing import RecordingChannel
from agentloop.testing.http import ScriptedServer, completion
from agentloop.tokens import MESSAGE_OVERHEAD
from systems import ContextBuildingSystem, standard_pipeline
from systems.compaction import CompactionSystem
from serve_kit import AGENTLOOP, TOKENS

WORKER_BOTS = textwrap.dedent(
    """
    import os

    from agentloop.adapters.llm.openai import OpenAICompatibleLLM
    from agentloop.testing import RecordingChannel, ScriptedLLM
    from systems import ToolLoopSystem


    def over_http(stores):
        return [ToolLoopSystem(OpenAICompatibleLLM(os.environ["MODEL_URL"], "tiny"), channel=RecordingChannel())]


    def scripted(stores):
        return [ToolLoopSystem(ScriptedLLM(["hi"]), channel=RecordingChannel())]
    """
)
NOWHERE_INBOX = "postgresql://me@/db?host=/nowhere"


def agentloop(*argv: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run([*AGENTLOOP, *argv], input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**environment, **(env or {})})


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def refused(server: ScriptedServer, status: int = 401) -> str:
    return f"agentloop: the model server refused the API key (GET {server.url}/models answered HTTP {status})"


def no_such_path(base: str) -> str:
    return f"agentloop: no such API path; the base URL usually ends in /v1 (GET {base}/models answered HTTP 404)"


@pytest.mark.parametrize("status", [401, 403])
def test_chat_with_a_key_the_server_refuses_stops_before_the_first_turn(server: ScriptedServer, tmp_path: Path, status: int) -> None:
    """A wrong API key started the chat and failed every turn with an apology, exit status 0."""
    server.models_status = status
    result = agentloop("chat", "--base-url", server.url, "--data-dir", "data", stdin="hi\n", cwd=tmp_path,
                       env={"AGENTLOOP_API_KEY": "sk-wrong"})
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (1, "", [refused(server, status)])
    assert server.gets[0]["auth"] == "Bearer sk-wrong" and server.requests == []


def test_chat_with_a_base_url_without_its_api_path_stops_before_the_first_turn(server: ScriptedServer, tmp_path: Path) -> None:
    base = server.url.removesuffix("/v1")
    result = agentloop("chat", "--base-url", base, "--data-dir", "data", stdin="hi\n", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (1, "", [no_such_path(base)])
    assert server.requests == []


@pytest.mark.parametrize("wrong", ["key", "path"])
def test_serve_with_a_refused_key_or_a_wrong_path_does_not_start(server: ScriptedServer, tmp_path: Path, wrong: str) -> None:
    (tmp_path / "tokens.toml").write_text(TOKENS)
    server.models_status = 401 if wrong == "key" else 200
    base = server.url if wrong == "key" else server.url.removesuffix("/v1")
    result = agentloop("serve", "--tokens", "tokens.toml", "--data-dir", "data", "--base-url", base, "--port", "9", cwd=tmp_path)
    expected = refused(server) if wrong == "key" else no_such_path(base)
    assert (result.returncode, result.stderr.splitlines()) == (1, [expected])


def test_worker_checks_its_pipelines_http_model_before_it_opens_the_inbox(server: ScriptedServer, tmp_path: Path) -> None:
    (tmp_path / "worker_bots.py").write_text(WORKER_BOTS)
    server.models_status = 401
    worker = ("worker", "--data-dir", "data", "--inbox", NOWHERE_INBOX, "--pipeline")
    result = agentloop(*worker, "worker_bots:over_http", cwd=tmp_path, env={"MODEL_URL": server.url})
    assert (result.returncode, result.stderr.splitlines()) == (1, [refused(server)])
    scripted = agentloop(*worker, "worker_bots:scripted", cwd=tmp_path)
    assert scripted.returncode == 1 and scripted.stderr.startswith("agentloop: cannot open the inbox at postgresql://")


def test_chat_with_a_fallback_model_answers_from_it_when_the_first_is_not_found(server: ScriptedServer, tmp_path: Path) -> None:
    server.models = ["big", "small"]
    server.reply(404, {"error": {"message": "model 'big' not found"}})
    server.reply(body=completion("Hello from small."))
    result = agentloop("chat", "--base-url", server.url, "--model", "big", "--fallback-model", "small", "--data-dir", "data",
                       stdin="hi\n", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "bot> Hello from small.\n")
    assert [r["body"]["model"] for r in server.requests] == ["big", "small"]
    assert result.stderr.splitlines() == [
        "agentloop: llm ToolLoopSystem failed: model 'big' failed, so 'small' was asked instead: the model server refused "
        f"the request (HTTP 404 at {server.url}/chat/completions): model 'big' not found; check the base URL (it usually ends in /v1)"
    ]


def test_a_fallback_model_the_server_does_not_list_stops_chat_before_the_first_turn(server: ScriptedServer, tmp_path: Path) -> None:
    server.models = ["big"]
    result = agentloop("chat", "--base-url", server.url, "--model", "big", "--fallback-model", "smal", "--data-dir", "data",
                       stdin="hi\n", cwd=tmp_path)
    assert result.returncode == 1 and "does not serve a model named 'smal'" in result.stderr and server.requests == []


def _turns_over_http(server: ScriptedServer, tmp_path: Path, model: str, turns: int) -> tuple[int, int]:
    """`turns` long turns of a chat's bot on `server` (the model checked as `chat` checks it): the context
    budget's window and the most tokens any request sent to the model took by its estimate."""
    for _ in range(turns * 3):
        server.reply(body=completion("Noted. " * 20))
    llm = ModelSettings(model, base_url=server.url).llm()
    counter = EstimatedTokens()
    with open_bot(tmp_path / "data", llm, RecordingChannel()) as bot:
        window = next(s for s in bot.loop.systems if isinstance(s, ContextBuildingSystem)).budget.window
        for turn in range(turns):
            bot.loop.run_turn_sync(Session("long", user_id="ada"), IncomingMessage(f"Turn {turn}: " + "the weather today " * 40))
    sent = [request["body"]["messages"] for request in server.requests if request["body"]["messages"][0]["role"] == "system"]
    return window, max(sum(MESSAGE_OVERHEAD + counter.count(m.get("content") or "") for m in messages) for messages in sent)


@pytest.mark.parametrize("field", ["max_model_len", "context_length", "loaded_context_length", "max_input_tokens"])
def test_the_context_window_the_model_listing_gives_is_the_budget_of_every_prompt(
    server: ScriptedServer, tmp_path: Path, field: str
) -> None:
    """No window configured: the start-up check reads the model's window from the listing (vLLM, OpenRouter,
    LM Studio, Anthropic's field names) and no prompt of a long session outgrows it."""
    server.models = ["qwen"]
    server.model_fields = {"qwen": {field: 2000}}
    window, largest = _turns_over_http(server, tmp_path, "qwen", 12)
    assert window == 2000
    assert largest <= ContextBudget.for_window(2000).prompt


def test_a_listing_without_a_window_leaves_the_documented_default(server: ScriptedServer, tmp_path: Path) -> None:
    """A server that lists no window (Ollama, OpenAI): the budget is the default window, and the session's
    turns are all sent while they fit it."""
    server.models = ["llama3.2:latest"]
    window, largest = _turns_over_http(server, tmp_path, "llama3.2", 12)
    assert window == ContextBudget().window
    assert largest > ContextBudget.for_window(2000).prompt


def test_an_openai_embedder_of_the_stores_command_takes_its_key_by_the_models_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup was written twice (the bots and `stores reembed`); an empty variable is skipped by both."""
    from agentloop import bots
    from agentloop.cli import stores as stores_command

    monkeypatch.setenv("AGENTLOOP_API_KEY", "")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    embedder = stores_command.embedder_from_spec("openai:text-embedding-3-small", base_url="http://127.0.0.1:1/v1")
    assert embedder.http.headers["Authorization"] == "Bearer sk-openai"  # type: ignore[attr-defined]
    assert bots.api_key_from(bots.API_KEY_VARIABLES) == "sk-openai" and stores_command.api_key_from is bots.api_key_from


def test_a_pipeline_built_before_the_start_up_check_budgets_with_the_window_the_check_read(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """A `--pipeline` factory builds the pipeline before `chat` checks its model (`check_models`): the window
    that check reads from the listing is still the budget of context building and compaction at the first turn."""
    server.models = ["qwen"]
    server.model_fields = {"qwen": {"max_model_len": 2000}}
    server.reply(body=completion("Noted."))
    with standard_pipeline(OpenAICompatibleLLM(server.url, "qwen"), RecordingChannel(), data_dir=tmp_path) as pipeline:
        loop = pipeline.build()
        check_models(loop)
        loop.run_turn_sync(Session("s", user_id="ada"), IncomingMessage("hi"))
        windows = {pipeline.get(ContextBuildingSystem).budget.window, pipeline.get(CompactionSystem).budget.window}
    assert windows == {2000}
