"""`agentloop serve`: the HTTP API over a bot, its tokens and tenants, its limits and its errors."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from agentloop import FailureKind, LlmCallError, LlmReply, LlmRequest
from agentloop.serve import TokenFileError, create_app, load_tokens
from agentloop.serve.limits import RateLimiter
from agentloop.serve.openapi import OPENAPI
from agentloop.testing import ScriptedLLM
from agentloop.testing.serve import served
from agentloop.serve import Caller
from mid_turn_kit import HeldModel
from serve_kit import (
    ALICE, BOB, CAROL, HELLO, Blocking, GatedLLM, auth, client, new_session, say_hi, seed_note, serve_command, settings,
    usefulness,
)


def test_health_answers_without_a_token(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/healthz")

    assert asyncio.run(body()).json() == {"status": "ok"}


@pytest.mark.parametrize("header", [None, "Bearer not-a-known-token", f"Basic {ALICE}"])
def test_a_request_without_a_valid_bearer_token_gets_401_with_a_json_error(tmp_path: Path, header: str | None) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.post("/v1/sessions", headers={} if header is None else {"Authorization": header})

    answer = asyncio.run(body())
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    assert "Authorization: Bearer" in answer.json()["error"]["message"]


def test_me_tells_the_user_and_tenant_of_the_token(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/me", headers=auth(ALICE))

    assert asyncio.run(body()).json() == {"user": "alice", "tenant": {"org": "acme", "team": "support", "project": None}, "role": "user"}


def test_a_message_gets_the_reply_as_json_and_lands_in_the_history(tmp_path: Path) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            reply = await http.post(f"/v1/sessions/{session}/messages", json={"text": "hello"}, headers=auth(ALICE))
            history = await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return reply, history

    reply, history = asyncio.run(body())
    assert reply.status_code == 200
    outcome = reply.json()
    assert outcome["finish_reason"] == "success"
    assert outcome["text"] == "echo: hello"
    assert outcome["failures"] == [] and outcome["fallback"] is False and outcome["approval"] is None
    assert outcome["turn_id"] and outcome["message_id"]
    assert history.json() == {"messages": [{"role": "user", "text": "hello"}, {"role": "assistant", "text": "echo: hello"}]}


@pytest.mark.parametrize("intruder", [BOB, CAROL], ids=["another org", "the same user in another team"])
def test_a_session_is_not_found_for_a_token_of_another_tenant_chain(tmp_path: Path, intruder: str) -> None:
    async def body() -> list[httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http, ALICE)
            await http.post(f"/v1/sessions/{session}/messages", json={"text": "secret plans"}, headers=auth(ALICE))
            return [
                await http.get(f"/v1/sessions/{session}/messages", headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/feedback", json={"turn_id": "t", "positive": True}, headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/end", headers=auth(intruder)),
            ]

    for answer in asyncio.run(body()):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
        assert "secret plans" not in answer.text


def test_a_session_id_made_up_by_the_client_is_not_found(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/sessions/my-own-id/messages", headers=auth(ALICE))

    assert asyncio.run(body()).status_code == 404


def test_sse_sends_a_delta_before_the_model_has_finished_then_one_outcome(tmp_path: Path) -> None:
    llm = GatedLLM("Hel", "lo there")
    with served(create_app(settings(tmp_path, llm))) as url, httpx.Client(base_url=url, timeout=30) as http:
        session = http.post("/v1/sessions", headers=auth(ALICE)).json()["session_id"]
        headers = {**auth(ALICE), "Accept": "text/event-stream"}
        with http.stream("POST", f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            first = [next(lines), next(lines)]
            assert first == ["event: delta", 'data: {"text": "Hel"}']
            assert not llm.finished
            llm.release.set()
            rest = list(lines)
    events = [(name[len("event: "):], json.loads(data[len("data: "):])) for name, data, *_ in zip(rest[1::3], rest[2::3])]
    assert [name for name, _ in events if name == "outcome"] == ["outcome"]
    assert events[-1][0] == "outcome"
    assert events[-1][1]["text"] == "Hello there" and events[-1][1]["finish_reason"] == "success"
    assert "Hel" + "".join(data["text"] for name, data in events if name == "delta") == "Hello there"


def test_a_token_file_without_tokens_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text('secret = "0123456789abcdef0123"\n')
    with pytest.raises(TokenFileError, match=r"\[\[tokens\]\]"):
        load_tokens(path)


def test_a_token_may_be_listed_by_its_sha256(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\nsha256 = "{hashlib.sha256(ALICE.encode()).hexdigest()}"\nuser = "alice"\n')
    tokens = load_tokens(path)
    assert tokens.caller(ALICE) is not None and tokens.caller(ALICE).user == "alice"  # type: ignore[union-attr]
    assert tokens.caller(BOB) is None


def test_a_body_over_the_limit_gets_413(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path, max_body_bytes=100)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", json={"text": "x" * 200}, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 413
    assert answer.json()["error"] == {"code": "too_large", "message": "the request body is larger than 100 bytes; send less"}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (json.dumps({"text": "x" * 51}), "the limit is 50"),
        ("{not json", "not valid JSON"),
        (json.dumps({"text": 3}), "'text' must be a string"),
        (json.dumps(["hello"]), "must be a JSON object"),
        (json.dumps({"text": "   "}), "empty"),
    ],
    ids=["too long", "bad json", "mistyped field", "not an object", "blank"],
)
def test_a_bad_message_gets_422_saying_what_is_wrong(tmp_path: Path, content: str, says: str) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path, max_message_chars=50)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", content=content, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid"
    assert says in answer.json()["error"]["message"]


def test_a_token_over_its_rate_limit_gets_429_with_retry_after_while_others_go_on(tmp_path: Path) -> None:
    async def body() -> tuple[list[int], httpx.Response, httpx.Response]:
        async with client(settings(tmp_path, rate_per_minute=6, rate_burst=2)) as http:
            first = [(await http.get("/v1/me", headers=auth(ALICE))).status_code for _ in range(2)]
            return first, await http.get("/v1/me", headers=auth(ALICE)), await http.get("/v1/me", headers=auth(BOB))

    allowed, limited, other = asyncio.run(body())
    assert allowed == [200, 200]
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(limited.headers["Retry-After"]) <= 10
    assert other.status_code == 200


def test_a_turn_past_its_deadline_ends_with_finish_reason_deadline_inside_a_200(tmp_path: Path) -> None:
    slow = ScriptedLLM(["too late"], latency=2.0)

    async def body() -> httpx.Response:
        async with client(settings(tmp_path, slow, turn_timeout=0.2)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 200
    assert answer.json()["finish_reason"] == "deadline"
    assert answer.json()["text"]  # the fallback the user receives
    assert all("Error:" not in failure for failure in answer.json()["failures"])


def test_an_internal_error_is_a_json_500_without_a_stack_trace(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path, pipeline="serve_kit:broken_pipeline")) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "internal"
    assert "Traceback" not in answer.text and "RuntimeError" not in answer.text and "internal detail" not in answer.text


def test_failures_in_the_outcome_are_user_safe(tmp_path: Path) -> None:
    failing = ScriptedLLM([LlmCallError("upstream said: key sk-secret is invalid", kind=FailureKind.UNKNOWN)])

    async def body() -> httpx.Response:
        async with client(settings(tmp_path, failing)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE))

    outcome = asyncio.run(body()).json()
    assert outcome["finish_reason"] == "error" and outcome["fallback"] is True
    assert outcome["failures"] == ["the model failed"]


def test_the_openapi_document_lists_exactly_the_routes_of_the_app(tmp_path: Path) -> None:
    from starlette.routing import Mount, Route

    app = create_app(settings(tmp_path))
    served_routes = set()
    for route in app.routes:
        if isinstance(route, Route):
            served_routes |= {(route.path, method.lower()) for method in route.methods or () if method != "HEAD"}
        elif isinstance(route, Mount):
            served_routes.add((f"{route.path}/{{path}}", "get"))

    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/openapi.json")

    document = asyncio.run(body()).json()  # the native API's and each protocol's paths
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert documented == served_routes
    assert OPENAPI["paths"].items() <= document["paths"].items()
    assert OPENAPI["components"]["schemas"].items() <= document["components"]["schemas"].items()


def test_feedback_on_a_turn_credits_the_note_that_turn_was_shown(tmp_path: Path) -> None:
    served_settings = settings(tmp_path)
    key = seed_note(served_settings.stores, "page through rate-limited APIs and verify totals", Caller("alice", "acme", "support"))

    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(served_settings) as http:
            session = await new_session(http)
            reply = await http.post(
                f"/v1/sessions/{session}/messages", json={"text": "how do I page through rate-limited APIs?"}, headers=auth(ALICE)
            )
            feedback = {"turn_id": reply.json()["turn_id"], "positive": True}
            return reply, await http.post(f"/v1/sessions/{session}/feedback", json=feedback, headers=auth(ALICE))

    reply, credited = asyncio.run(body())
    assert credited.json() == {"credited": 1}
    assert usefulness(served_settings.stores, key) == 1


def test_ending_a_session_says_what_distillation_made_of_it(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE))
            return await http.post(f"/v1/sessions/{session}/end", headers=auth(ALICE))

    ended = asyncio.run(body())
    assert ended.status_code == 200
    assert ended.json()["status"] == "skipped" and ended.json()["reason"]


def test_deciding_an_approval_that_is_not_pending_is_not_found(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/approvals/nothing-pending", json={"approve": True}, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 404
    assert "no tool call awaits approval" in answer.json()["error"]["message"]


def test_a_session_idle_past_the_idle_timeout_is_ended(tmp_path: Path) -> None:
    async def body() -> tuple[str, list[dict[str, object]]]:
        with capture_logs() as logs:
            async with client(settings(tmp_path, idle_timeout=0.2)) as http:
                session = await new_session(http)
                await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE))
                await asyncio.sleep(0.6)
        return session, logs

    session, logs = asyncio.run(body())
    assert [log["session_id"] for log in logs if log["event"] == "notes.end_session"] == [session]



def test_the_serve_command_serves_the_bot_until_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")])}
    with serve_command(tmp_path, env=env) as run:
        assert run.first_line.startswith(f"agentloop serve: {run.url} bot 'bot'")
        assert say_hi(run.url)[1] == HELLO
    assert run.returncode == 0, run.stderr
    assert run.stdout == "agentloop serve: stopped\n"


def test_concurrent_streams_of_one_session_each_get_their_own_turns_deltas(tmp_path: Path) -> None:
    echo = ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}", chunk=2, latency=0.05)

    async def body() -> list[tuple[str, str]]:
        async with client(settings(tmp_path, echo, rate_burst=20)) as http:
            session = await new_session(http)
            headers = {**auth(ALICE), "Accept": "text/event-stream"}

            async def stream(number: int) -> tuple[str, str]:
                await asyncio.sleep(number * 0.03)  # some arrive while an earlier turn ends and the next starts
                text = f"message number {number}"
                answer = await http.post(f"/v1/sessions/{session}/messages", json={"text": text}, headers=headers)
                events = [block.split("\n") for block in answer.text.strip().split("\n\n")]
                data = [(name[len("event: "):], json.loads(line[len("data: "):])) for name, line in events]
                deltas = "".join(value["text"] for name, value in data if name == "delta")
                return deltas, data[-1][1]["text"]

            return await asyncio.gather(*(stream(number) for number in range(8)))

    for shown, final in asyncio.run(body()):
        assert shown == final


def test_an_unknown_route_or_method_is_a_json_error_too(tmp_path: Path) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/nothing-here", headers=auth(ALICE)), await http.delete("/v1/sessions", headers=auth(ALICE))

    missing, wrong_method = asyncio.run(body())
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (405, "method_not_allowed")
    assert "/openapi.json" in wrong_method.json()["error"]["message"]


class _CountingLLM:
    """Answers after a short wait, counting how many of its calls were under way at once."""

    def __init__(self) -> None:
        self.running = self.most = 0

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        return LlmReply("done")


@pytest.mark.parametrize(("bound", "most"), [(None, 4), (2, 2)])
def test_max_concurrent_turns_bounds_the_turns_running_at_once(tmp_path: Path, bound: int | None, most: int) -> None:
    """Four sessions post at once: unbounded, all four turns run together; with a bound of 2,
    two wait their turn, and every turn is still answered."""
    model = _CountingLLM()

    async def body() -> list[httpx.Response]:
        async with client(settings(tmp_path, model, max_concurrent_turns=bound)) as http:
            sessions = [await new_session(http) for _ in range(4)]
            posts = [http.post(f"/v1/sessions/{s}/messages", json={"text": "hi"}, headers=auth(ALICE)) for s in sessions]
            return list(await asyncio.gather(*posts))

    answers = asyncio.run(body())
    assert [a.json()["text"] for a in answers] == ["done"] * 4
    assert model.most == most


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_concurrent_turns_must_be_a_whole_number_of_at_least_one(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="max_concurrent_turns must be a whole number of at least 1"):
        settings(tmp_path, max_concurrent_turns=bad)


def _with_tests_on_path() -> dict[str, str]:
    """The environment for an `agentloop serve` subprocess that loads a pipeline of tests/serve_kit.py."""
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")])}


def test_a_tool_raising_system_exit_fails_alone_and_the_server_goes_on_answering_every_tenant(tmp_path: Path) -> None:
    with serve_command(tmp_path, "--pipeline", "serve_kit:argparse_tool_bot", env=_with_tests_on_path()) as run:
        alice = httpx.post(f"{run.url}/v1/sessions", headers=auth(ALICE)).json()["session_id"]
        exiting = httpx.post(f"{run.url}/v1/sessions/{alice}/messages", json={"text": "report --weeks 3"},
                             headers=auth(ALICE), timeout=30)
        bob = httpx.post(f"{run.url}/v1/sessions", headers=auth(BOB)).json()["session_id"]
        after = httpx.post(f"{run.url}/v1/sessions/{bob}/messages", json={"text": "hi"}, headers=auth(BOB), timeout=30)
        health = httpx.get(f"{run.url}/healthz")
    assert exiting.status_code == 200 and exiting.json()["text"] == "the report said: error: SystemExit: 2"
    assert after.status_code == 200 and after.json()["text"] == "echo: hi"
    assert health.status_code == 200
    assert run.returncode == 0, run.stderr
    assert run.stdout == "agentloop serve: stopped\n"


def test_a_server_whose_event_loop_dies_while_serving_says_it_stopped_not_that_it_did_not_start(tmp_path: Path) -> None:
    with serve_command(tmp_path, "--pipeline", "serve_kit:crashing_pipeline", env=_with_tests_on_path()) as run:
        session = httpx.post(f"{run.url}/v1/sessions", headers=auth(ALICE)).json()["session_id"]
        try:
            httpx.post(f"{run.url}/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(ALICE), timeout=30)
        except httpx.TransportError:
            pass  # the connection may end with the loop; else the turn, cancelled as the loop winds down, answers 500
    assert run.returncode == 1
    assert "agentloop: the server stopped: SystemExit: 3" in run.stderr.splitlines()
    assert "did not start" not in run.stderr


def test_a_blocking_sync_tool_leaves_health_answering_and_the_turn_ends_at_its_deadline_while_it_blocks(
    tmp_path: Path,
) -> None:
    Blocking.reset()

    async def body() -> tuple[httpx.Response, bool, httpx.Response, bool]:
        async with client(settings(tmp_path, pipeline="serve_kit:blocking_tool_bot", turn_timeout=2.0)) as http:
            session = await new_session(http)
            turn = asyncio.create_task(
                http.post(f"/v1/sessions/{session}/messages", json={"text": "look it up"}, headers=auth(ALICE)))
            assert await asyncio.to_thread(Blocking.entered.wait, 30), "the model never called the tool"
            health = await http.get("/healthz")
            health_while_blocked = not Blocking.returned.is_set()
            answer = await turn
            answer_while_blocked = not Blocking.returned.is_set()
            Blocking.release.set()
            return health, health_while_blocked, answer, answer_while_blocked

    health, health_while_blocked, answer, answer_while_blocked = asyncio.run(body())
    assert health.status_code == 200 and health_while_blocked, "/healthz waited for the blocking tool"
    assert answer.status_code == 200 and answer_while_blocked, "the turn waited for the blocking tool past its deadline"
    assert answer.json()["finish_reason"] == "deadline"


RESPELLED = ["bEaReR {}", "Bearer   {}", "\tBEARER {}  ", "bearer {}", "Bearer {}\t"]


def test_respelling_the_authorization_header_does_not_escape_the_tokens_rate_limit(tmp_path: Path) -> None:
    async def body() -> list[int]:
        async with client(settings(tmp_path, rate_per_minute=6, rate_burst=2)) as http:
            return [
                (await http.get("/v1/me", headers={"Authorization": RESPELLED[number % len(RESPELLED)].format(ALICE)})).status_code
                for number in range(100)
            ]

    statuses = asyncio.run(body())
    assert statuses[:2] == [200, 200]
    assert statuses[2:] == [429] * 98


def test_the_rate_limiter_forgets_a_bucket_once_it_is_full_again() -> None:
    now = [0.0]
    limiter = RateLimiter(60, 5, clock=lambda: now[0])
    for key in range(1000):
        assert limiter.check(f"token-{key}") == 0
    assert len(limiter) == 1000
    now[0] = 4.0  # not yet full: five requests refill in five seconds
    limiter.check("another")
    assert len(limiter) == 1001
    now[0] = 8.0
    assert limiter.check("token-0") == 0
    assert len(limiter) == 2  # only the buckets touched within the refill time are kept


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"text": ' + "[" * 1000 + "]" * 1000 + "}", "nests deeper than 32"),
        ('{"text": "hi", "x": ' + "[" * 40 + "]" * 40 + "}", "nests deeper than 32"),
        ('{"text": "hi", "x": ' + "7" * 5000 + "}", "the limit is 64"),
        ('{"text": "hi", "x": 1.' + "5" * 100 + "}", "the limit is 64"),
        ('{"text": "hi", "x": NaN}', "NaN is not a JSON number"),
    ],
    ids=["nested 1000 deep", "nested 40 deep", "5000-digit integer", "long float", "NaN"],
)
def test_a_crafted_json_body_gets_422_not_500(tmp_path: Path, content: str, says: str) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path, max_body_bytes=64 * 1024)) as http:
            session = await new_session(http)
            return await http.post(f"/v1/sessions/{session}/messages", content=content, headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]["message"]


def test_a_session_id_whose_mac_is_not_ascii_is_not_found_rather_than_an_error(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            nonce = session.partition(".")[0]
            return await http.get(f"/v1/sessions/{nonce}.%C3%A9%C3%A9/messages", headers=auth(ALICE))

    answer = asyncio.run(body())
    assert answer.status_code == 404
    tokens = load_tokens(settings(tmp_path).tokens)  # type: ignore[arg-type]
    assert not tokens.owns(Caller("alice"), "0123.\u00e9\ud800")


@pytest.mark.parametrize(
    "message_id",
    ["", "a" * 129, "has space", "\ud800", "nul\u0000", "a" * 12000, "naïve", "a/b"],
    ids=["empty", "129 chars", "space", "lone surrogate", "NUL", "12 KB", "non-ASCII", "slash"],
)
def test_a_message_id_outside_its_grammar_gets_422_before_any_turn_runs(tmp_path: Path, message_id: str) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            content = json.dumps({"text": "hi", "message_id": message_id})  # ASCII, escapes included
            sent = await http.post(f"/v1/sessions/{session}/messages", content=content, headers=auth(ALICE))
            return sent, await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))

    sent, history = asyncio.run(body())
    assert sent.status_code == 422
    assert "1-128 letters, digits" in sent.json()["error"]["message"]
    assert history.json() == {"messages": []}


def test_a_repeated_message_id_in_direct_mode_returns_the_stored_outcome_without_a_second_turn(tmp_path: Path) -> None:
    llm = ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")

    async def send(text: str, *, stream: bool = False) -> httpx.Response:
        async with client(settings(tmp_path, llm)) as http:
            headers = {**auth(ALICE), "Accept": "text/event-stream"} if stream else auth(ALICE)
            return await http.post(f"/v1/sessions/{session}/messages", json={"text": text, "message_id": "client-1"}, headers=headers)

    async def start() -> str:
        async with client(settings(tmp_path, llm)) as http:
            return await new_session(http)

    async def history() -> list[str]:
        async with client(settings(tmp_path, llm)) as http:
            found = await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return [message["text"] for message in found.json()["messages"]]

    session = asyncio.run(start())
    first = asyncio.run(send("hello"))
    again = asyncio.run(send("hello"))  # a server started again: the outcome is durable
    streamed = asyncio.run(send("hello", stream=True))
    other = asyncio.run(send("something else"))
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and first.json()["text"] == "echo: hello"
    assert streamed.text.startswith("event: outcome\n") and first.json()["turn_id"] in streamed.text
    assert other.status_code == 422 and "already used" in other.json()["error"]["message"]
    assert len(llm.requests) == 1
    assert asyncio.run(history()) == ["hello", "echo: hello"]


def test_in_direct_mode_each_tenant_and_user_has_its_own_message_ids(tmp_path: Path) -> None:
    async def body() -> list[httpx.Response]:
        async with client(settings(tmp_path)) as http:
            answers = []
            for token, text in ((ALICE, "from alice"), (BOB, "from bob"), (CAROL, "from alice in sales")):
                session = await new_session(http, token)
                answers.append(
                    await http.post(f"/v1/sessions/{session}/messages", json={"text": text, "message_id": "m1"}, headers=auth(token))
                )
            return answers

    answers = asyncio.run(body())
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert [answer.json()["text"] for answer in answers] == ["echo: from alice", "echo: from bob", "echo: from alice in sales"]


def test_nul_and_lone_surrogates_in_a_message_are_replaced_before_it_is_stored(tmp_path: Path) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            content = '{"text": "a\\u0000b\\ud800c"}'
            sent = await http.post(f"/v1/sessions/{session}/messages", content=content, headers=auth(ALICE))
            return sent, await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))

    sent, history = asyncio.run(body())
    assert sent.status_code == 200
    assert history.json()["messages"][0] == {"role": "user", "text": "a\ufffdb\ufffdc"}


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/healthz", "/v1/me", "/no-such-route"])
def test_every_response_forbids_inline_script_sniffing_and_framing(tmp_path: Path, path: str) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get(path, headers=auth(ALICE))

    answer = asyncio.run(body())
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_message_sent_while_a_turn_of_its_session_runs_gets_409_under_the_reject_policy(tmp_path: Path) -> None:
    model = HeldModel()

    async def body() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with client(settings(tmp_path, model, mid_turn="reject")) as http:
            session = await new_session(http)
            url = f"/v1/sessions/{session}/messages"
            first = asyncio.create_task(http.post(url, json={"text": "first"}, headers=auth(ALICE)))
            await asyncio.wait_for(model.called.wait(), 30)  # a guard against a hang, not a timing check
            refused = await http.post(url, json={"text": "second"}, headers={**auth(ALICE), "Accept": "text/event-stream"})
            model.release.set()
            answered = await first
            return refused, answered, await http.post(url, json={"text": "third"}, headers=auth(ALICE))

    refused, answered, later = asyncio.run(body())
    assert refused.status_code == 409 and refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error["code"] == "turn_in_progress" and "still running" in error["message"] and "\n" not in error["message"]
    assert answered.status_code == 200 and later.status_code == 200


def test_the_outcome_lists_the_tool_steps_of_its_turn_and_a_failed_one_without_its_error_text(tmp_path: Path) -> None:
    async def body() -> tuple[dict[str, object], dict[str, object]]:
        async with client(settings(tmp_path, pipeline="serve_kit:argparse_tool_bot")) as http:
            session = await new_session(http)
            ran = await http.post(f"/v1/sessions/{session}/messages", json={"text": "report --days 3"}, headers=auth(ALICE))
            failed = await http.post(f"/v1/sessions/{session}/messages", json={"text": "report --weeks 3"}, headers=auth(ALICE))
            return ran.json(), failed.json()

    ran, failed = asyncio.run(body())
    assert ran["tools"] == [{"name": "report", "arguments": {"options": "--days 3"}, "result": "report over 3 days", "failed": False}]
    assert failed["tools"] == [{"name": "report", "arguments": {"options": "--weeks 3"}, "result": None, "failed": True}]


def test_a_tool_steps_long_result_is_cut_to_what_the_page_shows() -> None:
    from datetime import UTC, datetime

    from agentloop import ToolExecution
    from agentloop.serve.outcome import RESULT_SHOWN, tool_step

    execution = ToolExecution("call-1", "dump", {}, datetime.now(UTC), 1.0, "s", result="x" * (RESULT_SHOWN + 10))
    shown = tool_step(execution)["result"]
    assert len(shown) == RESULT_SHOWN and shown.endswith("…")
