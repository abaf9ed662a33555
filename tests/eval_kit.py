"""Bots `agentloop eval --pipeline eval_kit:...` evaluates in the tests: one that knows the capital of
France and one that does not, both greeting the same way, on a scripted model."""

from __future__ import annotations

from agentloop import LlmRequest
from agentloop.ports import Channel, Stores
from agentloop.testing import ScriptedLLM
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
