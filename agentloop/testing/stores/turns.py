"""The turn storage suite (I15): turns over stores made to fail at random points are reported as stored only when they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.context import IncomingMessage, Session
from agentloop.ports.stores import Stores
from agentloop.messages import ChatMessage
from agentloop.outcome import FinishReason
from agentloop.scopes import history_scope
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.testing.stores._kit import Fault, StoreFaults, Backend, unique, failing_stores, run


class TurnStorageTests(Backend):
    """The standard pipeline's turns over this backend's stores when store calls fail (I15)."""

    PROMISED = ("sessions.append", "memory.add")
    """The writes a turn reports on (its history and memory)."""

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(
        st.lists(st.sampled_from(Fault), max_size=12),
        st.lists(st.text("abcdefgh ", min_size=1, max_size=8).map(str.strip).filter(bool), min_size=1, max_size=3),
    )
    def test_i15_a_turn_is_reported_success_only_if_its_exchange_was_stored(
        self, stores: Stores, faults: list[Fault], texts: list[str]
    ) -> None:
        """I15: with store calls failing before or after they happen, a turn reported SUCCESS has its
        exchange in history exactly once, and a turn whose history or memory write failed is not SUCCESS."""
        from agentloop.bots import built_pipeline  # the composition root, which knows the standard pipeline

        injected = StoreFaults.in_order(faults)
        session = Session(f"i15-{next(unique)}", user_id="ada")
        offered: dict[str, Callable[[], Any]] = {
            "llm": lambda: ScriptedLLM(lambda request: f"echo {request.messages[-1].content}"),
            "channel": RecordingChannel,
            "stores": lambda: failing_stores(stores, injected),
        }
        with built_pipeline("systems:standard_pipeline", offered) as loop:
            for n, text in enumerate(texts):
                said = f"{n} {text}"
                failed_before = len(injected.failed)
                outcome = run(loop.run_turn(session, IncomingMessage(said))).turn_outcome
                assert outcome is not None
                lost = [call for call, _ in injected.failed[failed_before:] if call in self.PROMISED]
                history = run(stores.sessions.recent(history_scope(session), 100))
                exchange = (ChatMessage.user(said), ChatMessage.assistant(f"echo {said}"))
                stored = sum(history[i : i + 2] == exchange for i in range(len(history)))
                if outcome.finish_reason is FinishReason.SUCCESS:
                    assert stored == 1 and not outcome.writes_lost
                if lost:
                    assert outcome.finish_reason is not FinishReason.SUCCESS and outcome.writes_lost
