"""The trajectory store suite: executions in order per session, dedup, quarantine, distilled hashes, tenant isolation."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from agentloop.ports.stores import Stores
from agentloop.scopes import Scope
from agentloop.testing.notes import make_execution, make_executions
from agentloop.testing.stores._kit import AT, CHAIN, LATER, Backend, at_once, run


class TrajectoryStoreTests(Backend):
    """`TrajectoryStore`: executions per session in start order, each stored once, read by chain."""

    def test_a_batch_comes_back_with_every_field(self, stores: Stores) -> None:
        parent = make_execution("plan", project_id="p1", context_snapshot={"turn": "1"}, org_id="o1", team_id="t1")
        child = attrs.evolve(
            make_execution(
                "write_file", arguments={"path": "a.py", "lines": [1, 2], "mode": {"append": True}}, error="disk full",
                parent_id=parent.id, started_at=parent.started_at + timedelta(seconds=1), duration_ms=12.5,
                project_id="p1", step_id="m1",
            ),
            company_id="c2",
        )
        run(stores.trajectories.append([parent, child]))
        assert run(stores.trajectories.load("test-session")).executions == (parent, child)
        assert run(stores.trajectories.count()) == 2

    def test_executions_come_back_in_start_order_per_session(self, stores: Stores) -> None:
        first, second, third = make_executions(["a", "b", "c"])
        other = make_execution("x", session_id="other")
        run(stores.trajectories.append([third, other]))
        run(stores.trajectories.append([first, second]))
        loaded = run(stores.trajectories.load("test-session"))
        assert loaded.session_id == "test-session" and [e.tool_name for e in loaded.executions] == ["a", "b", "c"]
        assert [e.tool_name for e in run(stores.trajectories.load("other")).executions] == ["x"]
        assert run(stores.trajectories.load("nobody")).executions == ()

    def test_an_execution_already_stored_is_skipped(self, stores: Stores) -> None:
        batch = make_executions(["a", "b"])
        run(stores.trajectories.append(batch))
        run(stores.trajectories.append(batch))
        rewritten = attrs.evolve(batch[1], tool_name="rewritten", result="other")
        run(stores.trajectories.append([rewritten, make_execution("c", started_at=batch[1].started_at + timedelta(hours=1))]))
        assert run(stores.trajectories.count()) == 3
        assert [e.tool_name for e in run(stores.trajectories.load("test-session")).executions] == ["a", "b", "c"]

    def test_a_session_id_reused_under_another_chain_reads_only_its_own(self, stores: Stores) -> None:
        """I11: the same session, project and user ids under another company, org, team or
        project, or of another user, are another trajectory."""
        ids: dict[str, Any] = {"session_id": "s1", "user_id": "ada", "project_id": "p1", "team_id": "t1", "org_id": "o1"}
        mine = attrs.evolve(make_execution("mine", **ids), company_id="acme")
        theirs = [
            attrs.evolve(make_execution("c", **ids), company_id="other"),
            *(attrs.evolve(make_execution(part, **{**ids, part: "other"}), company_id="acme")
              for part in ("org_id", "team_id", "project_id", "user_id")),
        ]
        run(stores.trajectories.append([mine, *theirs]))
        assert run(stores.trajectories.load("s1", CHAIN)).executions == (mine,)
        for execution in theirs:
            reader = Scope(execution.company_id, execution.org_id, execution.team_id, execution.project_id,
                           execution.user_id, "s1")
            assert run(stores.trajectories.load("s1", reader)).executions == (execution,)
        assert len(run(stores.trajectories.load("s1")).executions) == 6

    def test_distilled_hashes_are_remembered_across_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        run(stores.trajectories.mark_distilled("abc", "s1", 7, AT))
        run(stores.trajectories.mark_distilled("abc", "s2", 8, LATER))
        run(stores.trajectories.append([make_execution("kept")]))
        stores.close()
        with open_backend() as again:
            assert run(again.trajectories.is_distilled("abc")) and not run(again.trajectories.is_distilled("def"))
            assert run(again.trajectories.count()) == 1

    def test_a_quarantined_execution_is_kept_escaped_and_apart(self, stores: Stores) -> None:
        odd = make_execution("t\u00f6\u00f6l\ud800", execution_id="id-\u00e9", session_id="s\u2603")
        run(stores.trajectories.quarantine(odd, "the store refused it: \u00ab bad \u00bb"))
        run(stores.trajectories.quarantine(make_execution("second"), "too large"))
        kept = run(stores.trajectories.quarantined())
        assert [row["tool_name"] for row in kept] == ["t\\xf6\\xf6l\\ud800", "second"]
        first = kept[0]
        assert (first["id"], first["session_id"], first["reason"]) == (
            "id-\\xe9", "s\\u2603", "the store refused it: \\xab bad \\xbb",
        )
        assert first["execution"].isascii() and json.loads(first["execution"])["id"] == "id-\u00e9"
        assert run(stores.trajectories.count()) == 0 and run(stores.trajectories.load("s\u2603")).executions == ()

    def test_concurrent_batches_lose_nothing(self, stores: Stores) -> None:
        batches = [make_executions(["a", "b", "c"], session_id=f"s{n}") for n in range(12)]
        at_once(stores.trajectories.append, batches)
        assert run(stores.trajectories.count()) == 36
        for batch in batches:
            assert run(stores.trajectories.load(batch[0].session_id)).executions == tuple(batch)
