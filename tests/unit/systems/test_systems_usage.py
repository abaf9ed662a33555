"""Usage accounting through the standard pipeline: the tool loop's `TurnUsage`, the prompt cache key,
the recording system, prices, and `agentloop usage`."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import attrs

from agentloop import (
    CallUsage,
    FailureKind,
    IncomingMessage,
    LlmCallError,
    LlmReply,
    LlmResponse,
    ModelPrice,
    Prices,
    Session,
    TurnUsage,
    Usage,
    tool,
)
from agentloop.adapters import open_stores
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.cli import main
from agentloop.ports import UsageFilter, UsageGroup
from agentloop.testing import RecordingChannel
from systems import StandardOptions, standard_pipeline


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


ADA = Session("s1", user_id="ada", project_id="p1", team_id="t1", org_id="o1")
BOB = Session("s2", user_id="bob", project_id="p1", team_id="t1", org_id="o1")
PRICES = Prices({"m-own": ModelPrice(input=1.0, output=2.0, cache_read=0.5)})


def reply(text: str | None, usage: Usage, model: str = "m-own") -> LlmReply:
    return LlmReply(text, usage=usage, model=model)


def test_a_turn_s_usage_lists_each_model_call_and_its_total_is_the_responses_usage(tmp_path: Path) -> None:
    llm = ScriptedLLM([
        attrs.evolve(ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), usage=Usage(100, 10, 40), model="m-own"),
        reply("3", Usage(130, 2, 100), model="m-other"),
    ])
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[add]) as pipeline:
        ctx = pipeline.build().run_turn_sync(ADA, IncomingMessage("1+2?"))
    turn = ctx.require(TurnUsage)
    assert turn.calls == (CallUsage("m-own", Usage(100, 10, 40)), CallUsage("m-other", Usage(130, 2, 100)))
    assert turn.total == Usage(230, 12, 140) == ctx.require(LlmResponse).usage


def test_every_request_of_a_session_carries_one_cache_key_and_another_session_another(tmp_path: Path) -> None:
    llm = ScriptedLLM(["one", "two", "three"])
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path) as pipeline:
        loop = pipeline.build()
        for session in (ADA, ADA, BOB):
            loop.run_turn_sync(session, IncomingMessage("hi"))
    keys = [request.cache_key for request in llm.requests]
    assert keys[0] == keys[1] != keys[2] and all(key and len(key) == 32 for key in keys)
    assert "s1" not in str(keys[0]) and "ada" not in str(keys[0])


def test_the_standard_pipeline_records_each_turn_priced_and_a_failed_turn_s_calls_too(tmp_path: Path) -> None:
    llm = ScriptedLLM([
        reply("hello", Usage(1_000_000, 1_000_000, 1_000_000)),
        attrs.evolve(ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), usage=Usage(10, 1), model="m-private"),
        LlmCallError("the model server failed (HTTP 503)", kind=FailureKind.UNKNOWN),
    ])
    with open_stores(tmp_path) as stores:
        pipeline = standard_pipeline(llm, RecordingChannel(), stores=stores, tools=[add], options=StandardOptions(prices=PRICES))
        loop = pipeline.build()
        loop.run_turn_sync(ADA, IncomingMessage("hi"))
        loop.run_turn_sync(BOB, IncomingMessage("1+2?"))
        ada = asyncio.run(stores.usage.total(UsageFilter(company_id="default", user_id="ada")))
        bob = asyncio.run(stores.usage.total(UsageFilter(session_id="s2")))
        team = asyncio.run(stores.usage.report(UsageFilter(org_id="o1"), UsageGroup.TENANT))
    assert (ada.calls, ada.known_cost) == (1, 0.5 + 2.0)
    assert (bob.calls, bob.usage, bob.known_cost, bob.unpriced_calls) == (1, Usage(10, 1), None, 1)
    assert [(line.key, line.total.calls) for line in team] == [("default/o1/t1/p1", 2)]


def test_agentloop_usage_prints_tokens_and_cost_per_key_with_unknown_prices_said(tmp_path: Path) -> None:
    llm = ScriptedLLM([reply("hello", Usage(1_000_000, 1_000_000, 1_000_000)), reply("hi", Usage(10, 1), model="m-private")])
    with open_stores(tmp_path) as stores:
        loop = standard_pipeline(llm, RecordingChannel(), stores=stores, options=StandardOptions(prices=PRICES)).build()
        loop.run_turn_sync(ADA, IncomingMessage("hi"))
        loop.run_turn_sync(BOB, IncomingMessage("hi"))
    out = io.StringIO()
    assert main(["usage", str(tmp_path), "--by", "user"], out) == 0
    assert out.getvalue().splitlines() == [
        "user         calls    input  cache read  cache write   output               cost",
        "default/ada      1  1000000     1000000            0  1000000            $2.5000",
        "default/bob      1       10           0            0        1            unknown",
        "total            2  1000010     1000000            0  1000001  $2.5000 + unknown",
    ]
    later = io.StringIO()
    assert main(["usage", str(tmp_path), "--since", "2999-01-01", "--by", "day"], later) == 0
    assert later.getvalue().splitlines()[-1].split() == ["total", "0", "0", "0", "0", "0", "$0.0000"]
