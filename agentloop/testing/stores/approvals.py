"""The approval store suite: pending approvals, taking one once, idempotent retakes, tenant isolation, reopening."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest

from agentloop.approvals import ApprovalRequest, PendingApproval
from agentloop.ports.stores import Stores
from agentloop.messages import ChatMessage, ToolCall
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN, Backend, at_once, namesakes, run


class ApprovalStoreTests(Backend):
    """`ApprovalStore`: tool calls awaiting approval per session and scope, each taken once."""

    @staticmethod
    def pending(approval_id: str, scope: Scope = CHAIN, minutes: int = 0) -> PendingApproval:
        session = scope.session_id or "s1"
        request = ApprovalRequest(approval_id, "delete_file", {"path": "a.txt", "force": True, "tags": ["x", None]},
                                  session, f"turn-{approval_id}", AT + timedelta(minutes=minutes))
        call = ToolCall(f"call-{approval_id}", "delete_file", dict(request.arguments))
        messages = (ChatMessage.system("be careful"), ChatMessage.user("delete a.txt \u00e9\x00"),
                    ChatMessage.assistant(None, (call,)))
        return PendingApproval(request, scope, call.id, messages)

    def test_pending_lists_a_sessions_undecided_approvals_oldest_first_whole(self, stores: Stores) -> None:
        other_session = attrs.evolve(CHAIN, session_id="s2")
        for n, approval_id in enumerate(("b", "a", "c")):
            run(stores.approvals.add(self.pending(approval_id, minutes=n)))
        run(stores.approvals.add(self.pending("d", other_session)))
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("b"), self.pending("a", minutes=1),
                                                              self.pending("c", minutes=2)]
        assert run(stores.approvals.pending(other_session, "s2")) == [self.pending("d", other_session)]
        assert run(stores.approvals.pending(CHAIN, "nobody")) == []

    def test_take_gives_the_approval_once_and_it_is_no_longer_pending(self, stores: Stores) -> None:
        run(stores.approvals.add(self.pending("a")))
        run(stores.approvals.add(self.pending("b", minutes=1)))
        assert run(stores.approvals.take(CHAIN, "a", True)) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", False)) is None
        assert run(stores.approvals.take(CHAIN, "missing", False)) is None
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("b", minutes=1)]
        assert run(stores.approvals.take(CHAIN, "b", False)) == self.pending("b", minutes=1)
        assert run(stores.approvals.pending(CHAIN, "s1")) == []

    def test_the_taker_with_the_first_ones_key_and_decision_gets_it_again_and_no_one_else(self, stores: Stores) -> None:
        """I13: a decision's turn run again after its worker died (same message, same key) finishes it;
        another key, no key, or the other decision still gets None."""
        run(stores.approvals.add(self.pending("a")))
        assert run(stores.approvals.take(CHAIN, "a", True, key="m1")) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True, key="m1")) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True, key="m2")) is None
        assert run(stores.approvals.take(CHAIN, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", False, key="m1")) is None
        for other in namesakes(CHAIN):
            assert run(stores.approvals.take(other, "a", True, key="m1")) is None
        assert run(stores.approvals.pending(CHAIN, "s1")) == []

    def test_a_second_approval_with_the_same_id_is_refused(self, stores: Stores) -> None:
        run(stores.approvals.add(self.pending("a")))
        with pytest.raises(ValueError):
            run(stores.approvals.add(self.pending("a", minutes=3)))
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("a")]

    def test_of_callers_taking_one_approval_at_once_exactly_one_gets_it(self, stores: Stores) -> None:
        """An approval is used once: of deciders racing (two clicks, two servers), one runs the call."""
        run(stores.approvals.add(self.pending("a")))
        taken = at_once(lambda approved: stores.approvals.take(CHAIN, "a", approved), [True, False] * 4)
        assert [t for t in taken if t is not None] == [self.pending("a")]

    def test_no_namesake_in_another_chain_sees_or_takes_the_approval(self, stores: Stores) -> None:
        """I11: the same session and approval id under another chain neither lists nor decides it."""
        run(stores.approvals.add(self.pending("a")))
        for other in namesakes(CHAIN):
            assert run(stores.approvals.pending(other, "s1")) == []
            assert run(stores.approvals.take(other, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", True)) == self.pending("a")

    def test_pending_and_decided_approvals_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.approvals.add(self.pending("a")))
        run(stores.approvals.add(self.pending("b", minutes=1)))
        run(stores.approvals.take(CHAIN, "b", True))
        stores.close()
        with open_backend() as again:
            assert run(again.approvals.pending(CHAIN, "s1")) == [self.pending("a")]
            assert run(again.approvals.take(CHAIN, "b", True)) is None
            assert run(again.approvals.take(CHAIN, "a", False)) == self.pending("a")
