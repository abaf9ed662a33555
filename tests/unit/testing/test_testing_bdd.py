"""agentloop.testing.bdd: what its docstring promises is what it registers and exports."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_bdd.steps import StepFunctionContext, step_function_context_registry

import agentloop.testing.bdd as bdd
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import StandardOptions, standard_pipeline

_STEP_LINE = re.compile(r"^    (Given|When|Then) (.+)$", re.M)


def _documented() -> list[tuple[str, str]]:
    """Each step line of the module docstring, with alternatives cut to the first one."""
    assert bdd.__doc__ is not None
    steps = []
    for keyword, text in _STEP_LINE.findall(bdd.__doc__.split("Steps (")[1]):
        steps.append((keyword.lower(), re.sub(r"(\S+?)(?:\|\S+)+", r"\1", text)))
    return steps


def _registered() -> list[StepFunctionContext]:
    return [c for c in step_function_context_registry.values() if c.step_func.__module__ == bdd.__name__]


def test_every_documented_step_text_matches_a_registered_step() -> None:
    registered = _registered()
    for keyword, text in _documented():
        assert any(c.type == keyword and c.parser.is_matching(text) for c in registered), f"{keyword} {text}"


def test_every_registered_step_is_documented() -> None:
    documented = _documented()
    for context in _registered():
        assert any(context.type == k and context.parser.is_matching(t) for k, t in documented), context.parser.name


def test_star_import_brings_the_steps_and_fixtures_and_nothing_else() -> None:
    namespace: dict[str, object] = {}
    exec("from agentloop.testing.bdd import *", namespace)
    names = set(namespace) - {"__builtins__"}
    step_fixtures = {n for n in names if n.startswith("pytestbdd_stepdef_")}
    assert len(step_fixtures) == len(_registered())
    assert names - step_fixtures == {"BotUnderTest", "scripted_llm", "recording_channel"}


def test_the_stores_steps_read_the_company_the_pipeline_was_built_for(tmp_path: Path) -> None:
    llm, channel = ScriptedLLM(["The shop opens at nine."]), RecordingChannel()
    with standard_pipeline(llm, channel, data_dir=tmp_path, options=StandardOptions(company_id="globex")) as pipeline:
        bot = bdd.BotUnderTest(pipeline.build(), llm, channel, pipeline.stores, company_id="globex")
        bot.say("When does the shop open?")
        assert [m.content for m in bot.history()] == ["When does the shop open?", "The shop opens at nine."]
        bdd.then_memory_holds(bot, "The shop opens at nine.")
        bdd.then_rag_finds(bot, "The shop opens at nine.", "shop opening")
