"""The summary store suite: versions in order, compare-and-set, reopening, tenant isolation."""

from __future__ import annotations

from collections.abc import Callable

from agentloop.ports.stores import Stores
from agentloop.ports.summaries import SessionSummary
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN, LATER, Backend, at_once, namesakes, run


def _summary(version: int, covered: int, text: str, scope: Scope = CHAIN) -> SessionSummary:
    return SessionSummary(scope, version, covered, text, AT if version == 1 else LATER)


class SummaryStoreTests(Backend):
    """`SummaryStore`: each history scope's summaries, version 1 first, each the next of the one before."""

    def test_a_session_never_compacted_has_no_summary(self, stores: Stores) -> None:
        assert run(stores.summaries.latest(CHAIN)) is None and run(stores.summaries.versions(CHAIN)) == ()

    def test_each_version_is_the_next_and_latest_is_the_newest_after_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        first, second = _summary(1, 10, "Ada's cat is Tom."), _summary(2, 30, "Ada's cat is Tom; she moved to Oslo.")
        assert run(stores.summaries.add(first)) is True
        assert run(stores.summaries.add(second)) is True
        stores.close()
        with open_backend() as again:
            assert run(again.summaries.latest(CHAIN)) == second
            assert run(again.summaries.versions(CHAIN)) == (first, second)

    def test_a_version_taken_or_out_of_turn_is_refused_and_changes_nothing(self, stores: Stores) -> None:
        assert run(stores.summaries.add(_summary(2, 5, "skips version 1"))) is False
        assert run(stores.summaries.add(_summary(1, 5, "first"))) is True
        assert run(stores.summaries.add(_summary(1, 9, "another first"))) is False
        assert run(stores.summaries.add(_summary(3, 9, "skips version 2"))) is False
        assert [s.text for s in run(stores.summaries.versions(CHAIN))] == ["first"]

    def test_of_processes_adding_one_version_at_once_exactly_one_wins(self, stores: Stores) -> None:
        """Two workers compacting one session at once store one summary; the other reads it and moves on."""
        added = at_once(lambda n: stores.summaries.add(_summary(1, n, f"by worker {n}")), range(8))
        assert added.count(True) == 1
        (kept,) = run(stores.summaries.versions(CHAIN))
        assert kept.text == f"by worker {added.index(True)}"

    def test_no_namesake_in_another_chain_sees_the_summary(self, stores: Stores) -> None:
        """I11: a summary is read only in the history scope it was written in."""
        run(stores.summaries.add(_summary(1, 4, "ada's secret")))
        for other in namesakes(CHAIN):
            assert run(stores.summaries.latest(other)) is None
            assert run(stores.summaries.add(_summary(1, 2, f"of {other.key}", other))) is True
        assert [s.text for s in run(stores.summaries.versions(CHAIN))] == ["ada's secret"]
