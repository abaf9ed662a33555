"""The turn storage suite (I15): turns over stores made to fail at random points are reported as stored only when they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.components import InboxTurn
from agentloop.context import IncomingMessage, Session
from agentloop.ports.stores import Stores
from agentloop.messages import ChatMessage
from agentloop.outcome import FinishReason
from agentloop.scopes import history_scope, memory_scope
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
        exchange in history and in memory exactly once, and a turn whose history or memory write failed
        is not SUCCESS."""
        from agentloop.bots import built_pipeline  # the composition root, which knows the standard pipeline

        injected = StoreFaults.in_order(faults)
        session = fresh_session()
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
                if outcome.finish_reason is FinishReason.SUCCESS:
                    assert stored_times(stores, session, said) == (1, 1) and not outcome.writes_lost
                if lost:
                    assert outcome.finish_reason is not FinishReason.SUCCESS and outcome.writes_lost

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(st.lists(st.sampled_from(Fault), max_size=12), st.integers(min_value=1, max_value=3))
    def test_i15_a_worker_turn_run_again_while_its_writes_were_lost_stores_its_message_once(
        self, stores: Stores, faults: list[Fault], messages: int
    ) -> None:
        """I15 with I13: a message whose turn is run again while its writes were lost, as a worker
        runs it (`InboxTurn`), is in history and in memory at most once, and exactly once in each
        when its last run is SUCCESS, whichever writes failed before or after they happened."""
        from agentloop.bots import built_pipeline

        injected = StoreFaults.in_order(faults)
        session = fresh_session()
        ledger = _Ledger()
        offered: dict[str, Callable[[], Any]] = {
            "llm": lambda: ScriptedLLM(lambda request: f"echo {request.messages[-1].content}"),
            "channel": RecordingChannel,
            "stores": lambda: failing_stores(stores, injected),
        }
        with built_pipeline("systems:standard_pipeline", offered) as loop:
            for n in range(messages):
                said = f"message {n}"
                for attempt in range(1, len(faults) + 2):  # a run whose writes were lost used up at least one fault
                    turn = InboxTurn(f"m{n}", attempt, ledger)
                    outcome = run(loop.run_turn(session, IncomingMessage(said), components=(turn,))).turn_outcome
                    assert outcome is not None
                    if not outcome.writes_lost:
                        break
                assert outcome is not None and not outcome.writes_lost
                history = run(stores.sessions.recent(history_scope(session), 100))
                memory = run(stores.memory.recent(memory_scope(session), 100))
                times = (history.count(ChatMessage.user(said)), sum(e.user_text == said for e in memory))
                assert times == (1, 1) if outcome.finish_reason is FinishReason.SUCCESS else max(times) <= 1


def fresh_session() -> Session:
    """A session and user no earlier example wrote to (the stores outlive an example)."""
    n = next(unique)
    return Session(f"i15-{n}", user_id=f"ada-{n}")


def stored_times(stores: Stores, session: Session, said: str) -> tuple[int, int]:
    """How many times the exchange of `said` and its echo is in the session's history, and in its memory."""
    history = run(stores.sessions.recent(history_scope(session), 100))
    exchange = (ChatMessage.user(said), ChatMessage.assistant(f"echo {said}"))
    memory = run(stores.memory.recent(memory_scope(session), 100))
    return (
        sum(history[i : i + 2] == exchange for i in range(len(history))),
        sum((e.user_text, e.assistant_text) == (said, f"echo {said}") for e in memory),
    )


class _Ledger:
    """The inbox's delivery ledger, in memory: the first run to claim a message id sends its reply."""

    def __init__(self) -> None:
        self.claimed: dict[str, int] = {}

    async def claim_delivery(self, message_id: str, attempt: int) -> bool:
        return self.claimed.setdefault(message_id, attempt) == attempt
