"""The retention suite: after a prune, rows older than each window are gone from every read
path, rows inside it and other tenants' rows are unchanged, and usage rolled up by day keeps
every day's totals.

Besides `open_backend`, a backend may give `prune` (how it applies a `Retention` to open
`Stores` as of a time; by default `agentloop.adapters.retention.prune_stores` on their URL)
and, for `HistoryRetentionTests`, `age_history` (how to make a history's last message as old
as a given time, since a store takes no time with a message).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.approvals import ApprovalRequest, PendingApproval
from agentloop.components import ToolExecution
from agentloop.messages import ChatMessage, Usage
from agentloop.ports.stores import Stores
from agentloop.ports.summaries import SessionSummary
from agentloop.privacy import Subject
from agentloop.ports.usage import RecordedCall, UsageFilter, UsageGroup, UsageRecord
from agentloop.retention import PruneReport, Retention
from agentloop.scopes import Scope
from agentloop.testing.notes import make_execution
from agentloop.testing.stores._kit import AT, CHAIN, Backend, namesakes, run, unique

NOW = AT + timedelta(days=40)
"""The time every prune of this suite runs at; a 30-day window keeps what is newer than AT + 10 days."""
OLD, RECENT = AT + timedelta(days=2), AT + timedelta(days=35)
OTHER = namesakes(CHAIN)[0]

Prune = Callable[[Stores, Retention, datetime], PruneReport]


class RetentionBackend(Backend):
    """The fixtures of the retention suite (see the module's docstring)."""

    @pytest.fixture
    def prune(self) -> Prune:
        from agentloop.adapters.retention import prune_stores

        return lambda stores, retention, now: prune_stores(stores.url, bot=stores.bot, retention=retention, now=now)

    @pytest.fixture
    def age_history(self) -> Callable[[Stores, Scope, datetime], None]:
        raise NotImplementedError("a backend running HistoryRetentionTests defines `age_history(stores, scope, when)`")


class UsageRetentionTests(RetentionBackend):
    """Usage: per-call rows of old days rolled up, each day's sums kept."""

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(st.lists(st.tuples(st.integers(0, 39), st.integers(0, 23), st.sampled_from(["s1", "s2"]), st.sampled_from(["m-1", None]),
                              st.integers(0, 500), st.sampled_from([None, 0.25, 1.5])), min_size=1, max_size=12))
    def test_rolling_usage_up_keeps_every_days_totals(
        self, stores: Stores, prune: Prune, calls: list[tuple[int, int, str, str | None, int, float | None]]
    ) -> None:
        """Invariant: the totals per day (and per session, model, tenant, and overall) are the
        same before and after usage older than the window is rolled up."""
        company = f"c{next(unique)}"
        for day, hour, session, model, tokens, cost in calls:
            scope = Scope(company, "o1", None, None, "ada", session)
            call = RecordedCall(model, Usage(tokens, tokens // 3, tokens // 5, 1), cost)
            run(stores.usage.record(UsageRecord(f"{company}-{next(unique)}", scope, AT + timedelta(days=day, hours=hour), (call,))))
        where = UsageFilter(company_id=company)

        def seen() -> list[object]:
            return [run(stores.usage.total(where))] + [run(stores.usage.report(where, by)) for by in UsageGroup]

        before = seen()
        prune(stores, Retention(usage_days=30), NOW)
        assert seen() == before

    def test_a_second_prune_changes_no_total(self, stores: Stores, prune: Prune) -> None:
        for n, at in enumerate((OLD, OLD + timedelta(hours=1), RECENT)):
            run(stores.usage.record(UsageRecord(f"t{n}", CHAIN, at, (RecordedCall("m", Usage(10, 1), 0.5),))))
        first = prune(stores, Retention(usage_days=30), NOW)
        total = run(stores.usage.total(UsageFilter(company_id=CHAIN.company_id)))
        prune(stores, Retention(usage_days=30), NOW)
        assert first.deleted["usage"] == 2 and first.rolled_up == 1
        assert run(stores.usage.total(UsageFilter(company_id=CHAIN.company_id))) == total and total.calls == 3

    def test_a_users_rolled_up_usage_is_exported_and_erased(self, stores: Stores, prune: Prune) -> None:
        async def exported(subject: Subject) -> list[dict[str, Any]]:
            return [record async for record in stores.usage.export(subject)]

        run(stores.usage.record(UsageRecord("old", CHAIN, OLD, (RecordedCall("m", Usage(10, 1), 0.5),))))
        run(stores.usage.record(UsageRecord("other", OTHER, OLD, (RecordedCall("m", Usage(20, 2), 0.5),))))
        prune(stores, Retention(usage_days=30), NOW)
        ada = Subject.user(str(CHAIN.user_id), company_id=CHAIN.company_id, org_id=CHAIN.org_id)
        assert [record["input_tokens"] for record in run(exported(ada))] == [10]
        assert run(stores.usage.erase(ada)) == 1
        assert run(exported(ada)) == []
        assert run(stores.usage.total(UsageFilter(company_id=CHAIN.company_id, user_id=CHAIN.user_id))).calls == 0
        assert run(stores.usage.total(UsageFilter(company_id=OTHER.company_id))).calls == 1


class SummaryRetentionTests(RetentionBackend):
    """Summaries: versions made before the window go; a history then starts again at version 1."""

    def test_old_summaries_go_and_newer_ones_stay(self, stores: Stores, prune: Prune) -> None:
        old_only, mixed = attrs.evolve(CHAIN, session_id="old"), attrs.evolve(CHAIN, session_id="mixed")
        run(stores.summaries.add(SessionSummary(old_only, 1, 4, "old text", OLD)))
        run(stores.summaries.add(SessionSummary(mixed, 1, 4, "first", OLD)))
        run(stores.summaries.add(SessionSummary(mixed, 2, 8, "second", RECENT)))
        run(stores.summaries.add(SessionSummary(OTHER, 1, 2, "other tenant", RECENT)))
        report = prune(stores, Retention(summaries_days=30), NOW)
        assert report.deleted["summaries"] == 2
        assert run(stores.summaries.latest(old_only)) is None and run(stores.summaries.versions(old_only)) == ()
        assert [s.text for s in run(stores.summaries.versions(mixed))] == ["second"]
        assert [s.text for s in run(stores.summaries.versions(OTHER))] == ["other tenant"]
        assert run(stores.summaries.add(SessionSummary(old_only, 1, 2, "again", NOW)))
        assert run(stores.summaries.add(SessionSummary(mixed, 3, 9, "third", NOW)))


class HistoryRetentionTests(RetentionBackend):
    """History: idle histories go whole, long ones keep their newest turns."""

    def test_a_history_idle_longer_than_the_window_goes_whole(
        self, stores: Stores, prune: Prune, age_history: Callable[[Stores, Scope, datetime], None]
    ) -> None:
        idle, active = attrs.evolve(CHAIN, session_id="idle"), attrs.evolve(CHAIN, session_id="active")
        for scope in (idle, active, OTHER):
            run(stores.sessions.append(scope, [ChatMessage.user(f"hello from {scope.session_id}"), ChatMessage.assistant("hi")]))
        run(stores.summaries.add(SessionSummary(idle, 1, 2, "a greeting", RECENT)))
        age_history(stores, idle, OLD)
        age_history(stores, active, RECENT)
        report = prune(stores, Retention(history_days=30), NOW)
        assert report.deleted["history"] == 2
        assert run(stores.sessions.recent(idle, 10)) == () and run(stores.sessions.count(idle)) == 0
        assert run(stores.summaries.latest(idle)) is None
        assert [m.content for m in run(stores.sessions.recent(active, 10))] == ["hello from active", "hi"]
        assert run(stores.sessions.count(OTHER)) == 2

    def test_a_history_keeps_its_newest_turns_and_its_summary_still_covers_what_it_did(
        self, stores: Stores, prune: Prune
    ) -> None:
        for n in range(5):
            run(stores.sessions.append(CHAIN, [ChatMessage.user(f"q{n}"), ChatMessage.assistant(f"a{n}")]))
        run(stores.sessions.append(OTHER, [ChatMessage.user("q"), ChatMessage.assistant("a")] * 3))
        run(stores.summaries.add(SessionSummary(CHAIN, 1, 8, "q0 to a3", RECENT)))
        report = prune(stores, Retention(history_turns=2), NOW)
        assert report.deleted["history"] == 6 + 2  # and the other tenant's first turn of three
        assert [m.content for m in run(stores.sessions.recent(CHAIN, 10))] == ["q3", "a3", "q4", "a4"]
        latest = run(stores.summaries.latest(CHAIN))
        assert latest is not None and run(stores.sessions.count(CHAIN)) - latest.covered == 2  # a4's turn is still unsummarised
        assert run(stores.sessions.count(OTHER)) == 4


class ApprovalRetentionTests(RetentionBackend):
    """Approvals: decided ones asked for before the window go; pending ones stay whatever their age."""

    @staticmethod
    def approval(approval_id: str, scope: Scope, at: datetime) -> PendingApproval:
        request = ApprovalRequest(approval_id, "delete_file", {"path": "a.txt"}, scope.session_id or "s1", f"turn-{approval_id}", at)
        return PendingApproval(request, scope, f"call-{approval_id}", (ChatMessage.user("delete a.txt \x00"),))

    def test_old_decided_approvals_go_and_pending_ones_stay(self, stores: Stores, prune: Prune) -> None:
        for approval_id, scope, at in (("old-decided", CHAIN, OLD), ("old-pending", CHAIN, OLD), ("new-decided", CHAIN, RECENT),
                                       ("other-old-pending", OTHER, OLD)):
            run(stores.approvals.add(self.approval(approval_id, scope, at)))
        run(stores.approvals.take(CHAIN, "old-decided", True, key="k0"))
        run(stores.approvals.take(CHAIN, "new-decided", False, key="k"))
        report = prune(stores, Retention(approvals_days=30), NOW)
        assert report.deleted["approvals"] == 1
        assert [p.request.approval_id for p in run(stores.approvals.pending(CHAIN, "s1"))] == ["old-pending"]
        assert run(stores.approvals.take(CHAIN, "old-decided", True, key="k0")) is None  # gone: a retake finds nothing
        assert run(stores.approvals.take(CHAIN, "new-decided", False, key="k")) is not None  # still there: the retake answers
        assert [p.request.approval_id for p in run(stores.approvals.pending(OTHER, "s1"))] == ["other-old-pending"]


class TrajectoryRetentionTests(RetentionBackend):
    """Trajectories: executions go once their session was distilled longer ago than the window."""

    @staticmethod
    def executions(session_id: str, start: datetime, count: int = 2) -> list[ToolExecution]:
        return [make_execution(f"tool{n}", session_id=session_id, started_at=start + timedelta(minutes=n)) for n in range(count)]

    def test_executions_distilled_before_the_window_go_and_the_rest_stay(self, stores: Stores, prune: Prune) -> None:
        run(stores.trajectories.append(self.executions("distilled-long-ago", OLD)))
        run(stores.trajectories.append(self.executions("distilled-lately", OLD)))
        run(stores.trajectories.append(self.executions("never-distilled", OLD)))
        later = self.executions("distilled-long-ago", OLD + timedelta(days=3), 1)
        run(stores.trajectories.append(later))
        run(stores.trajectories.mark_distilled("h1", "distilled-long-ago", 1, OLD + timedelta(days=1)))
        run(stores.trajectories.mark_distilled("h2", "distilled-lately", 2, RECENT))
        report = prune(stores, Retention(trajectories_days=30), NOW)
        assert report.deleted["trajectories"] == 2
        assert run(stores.trajectories.load("distilled-long-ago")).executions == tuple(later)
        assert len(run(stores.trajectories.load("distilled-lately")).executions) == 2
        assert len(run(stores.trajectories.load("never-distilled")).executions) == 2
        assert run(stores.trajectories.is_distilled("h1"))


class RetentionTests(UsageRetentionTests, SummaryRetentionTests, HistoryRetentionTests, ApprovalRetentionTests, TrajectoryRetentionTests):
    """Every store retention applies to: subclass this with `open_backend` and `age_history`."""

    def test_a_prune_with_nothing_set_deletes_nothing(self, stores: Stores, prune: Prune) -> None:
        run(stores.sessions.append(CHAIN, [ChatMessage.user("kept")]))
        report = prune(stores, Retention(), NOW)
        assert report.total == 0 and [m.content for m in run(stores.sessions.recent(CHAIN, 5))] == ["kept"]
