"""The usage store suite: a turn recorded once, sums per session, user, tenant chain and period,
unknown prices kept unknown, reports, reopening."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs

from agentloop.messages import Usage
from agentloop.ports.stores import Stores
from agentloop.ports.usage import (
    Charge,
    Period,
    Spent,
    RecordedCall,
    UsageFilter,
    UsageGroup,
    UsageLine,
    UsageRecord,
    UsageTotal,
    period_start,
)
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN, Backend, at_once, namesakes, run

SAME_TEAM = attrs.evolve(CHAIN, project_id="p2", user_id="bob", session_id="s2")
OTHER_ORG = Scope("acme", "o2", None, None, "ada", "s3")


def turn(turn_id: str, scope: Scope = CHAIN, *calls: RecordedCall, days: int = 0) -> UsageRecord:
    return UsageRecord(turn_id, scope, AT + timedelta(days=days, hours=1), calls or (priced(),))


def priced(input_tokens: int = 100, output_tokens: int = 10, cost: float | None = 0.5, model: str | None = "m-1") -> RecordedCall:
    return RecordedCall(model, Usage(input_tokens, output_tokens, input_tokens // 2, input_tokens // 4), cost)


class UsageStoreTests(Backend):
    """`UsageStore`: usage per turn, recorded once, summed over any part of the tenant chain and any period."""

    def test_a_turns_calls_are_summed_per_session_user_and_tenant_chain(self, stores: Stores) -> None:
        run(stores.usage.record(turn("t1", CHAIN, priced(100, 10, 0.5), priced(200, 20, 0.25))))
        run(stores.usage.record(turn("t2", SAME_TEAM, priced(1000, 100, 2.0))))
        run(stores.usage.record(turn("t3", OTHER_ORG, priced(7, 1, 0.125))))
        ada = UsageTotal(Usage(300, 30, 150, 75), 2, 0.75, 0)
        bob = UsageTotal(Usage(1000, 100, 500, 250), 1, 2.0, 0)
        usage = stores.usage
        assert run(usage.total(UsageFilter(company_id="acme", session_id="s1"))) == ada
        assert run(usage.total(UsageFilter(company_id="acme", org_id="o1", user_id="ada"))) == ada
        assert run(usage.total(UsageFilter(company_id="acme", org_id="o1", team_id="t1"))) == ada + bob
        assert run(usage.total(UsageFilter(company_id="acme", org_id="o1", team_id="t1", project_id="p2"))) == bob
        assert run(usage.total(UsageFilter(company_id="acme", user_id="ada"))).calls == 3
        assert run(usage.total(UsageFilter(company_id="acme"))).calls == 4
        assert run(usage.total(UsageFilter(company_id="globex"))) == UsageTotal()

    def test_a_turn_recorded_again_counts_once(self, stores: Stores) -> None:
        """I15: a usage write tried again (a lost answer, a turn's system run twice) records the turn once."""
        assert run(stores.usage.record(turn("t1", CHAIN, priced(), priced()))) is True
        assert run(stores.usage.record(turn("t1", CHAIN, priced(), priced()))) is False
        assert run(stores.usage.total(UsageFilter())).calls == 2

    def test_a_turn_recorded_without_a_session_again_counts_once(self, stores: Stores) -> None:
        no_session = attrs.evolve(CHAIN, session_id=None)
        assert run(stores.usage.record(turn("t1", no_session, priced()))) is True
        assert run(stores.usage.record(turn("t1", no_session, priced()))) is False
        assert run(stores.usage.total(UsageFilter(company_id="acme", user_id="ada"))).calls == 1

    def test_of_writers_recording_one_turn_at_once_one_records_it(self, stores: Stores) -> None:
        recorded = at_once(lambda _: stores.usage.record(turn("t1", CHAIN, priced(), priced(), priced())), range(8))
        assert recorded.count(True) == 1
        assert run(stores.usage.total(UsageFilter())).calls == 3

    def test_a_turn_without_calls_records_nothing(self, stores: Stores) -> None:
        assert run(stores.usage.record(UsageRecord("t0", CHAIN, AT, ()))) is False
        assert run(stores.usage.total(UsageFilter())) == UsageTotal()

    def test_a_period_covers_the_turns_from_its_start_to_before_its_end(self, stores: Stores) -> None:
        for day in (0, 1, 31):
            run(stores.usage.record(turn(f"t{day}", CHAIN, priced(10 ** (day % 5 + 1)), days=day)))
        second_day = period_start(AT + timedelta(days=1, hours=5), Period.DAY)
        assert second_day == AT + timedelta(days=1)
        assert period_start(AT + timedelta(days=40), Period.MONTH) == AT.replace(month=2)
        in_day = UsageFilter(company_id="acme", since=second_day, until=second_day + timedelta(days=1))
        assert run(stores.usage.total(in_day)).usage.input_tokens == 100
        january = UsageFilter(since=AT, until=AT.replace(month=2))
        assert run(stores.usage.total(january)).usage.input_tokens == 110
        assert run(stores.usage.total(UsageFilter(since=AT.replace(month=2)))).usage.input_tokens == 100

    def test_an_unknown_price_is_counted_as_unknown_never_as_zero(self, stores: Stores) -> None:
        run(stores.usage.record(turn("t1", CHAIN, priced(cost=0.5), priced(cost=None, model="private"))))
        run(stores.usage.record(turn("t2", SAME_TEAM, priced(cost=0.0, model="local"))))
        mixed = run(stores.usage.total(UsageFilter(session_id="s1")))
        assert (mixed.cost, mixed.unpriced_calls, mixed.known_cost) == (0.5, 1, None)
        free = run(stores.usage.total(UsageFilter(session_id="s2")))
        assert (free.cost, free.unpriced_calls, free.known_cost) == (0.0, 0, 0.0)

    def test_a_report_sums_per_key_in_key_order(self, stores: Stores) -> None:
        run(stores.usage.record(turn("t1", CHAIN, priced(100, cost=0.5), priced(200, cost=None, model=None))))
        run(stores.usage.record(turn("t2", SAME_TEAM, priced(1000, cost=2.0), days=1)))
        run(stores.usage.record(turn("t3", OTHER_ORG, priced(7, cost=0.125), days=40)))

        def keys(by: UsageGroup, where: UsageFilter = UsageFilter()) -> list[tuple[str, int]]:
            lines: list[UsageLine] = run(stores.usage.report(where, by))
            return [(line.key, line.total.usage.input_tokens) for line in lines]

        assert keys(UsageGroup.TENANT) == [("acme/o1/t1/p1", 300), ("acme/o1/t1/p2", 1000), ("acme/o2/-/-", 7)]
        assert keys(UsageGroup.USER) == [("acme/ada", 307), ("acme/bob", 1000)]
        assert keys(UsageGroup.SESSION) == [("acme/s1", 300), ("acme/s2", 1000), ("acme/s3", 7)]
        assert keys(UsageGroup.DAY) == [("2026-01-01", 300), ("2026-01-02", 1000), ("2026-02-10", 7)]
        assert keys(UsageGroup.MONTH) == [("2026-01", 1300), ("2026-02", 7)]
        assert keys(UsageGroup.MODEL) == [("-", 200), ("m-1", 1107)]
        assert keys(UsageGroup.USER, UsageFilter(org_id="o1", user_id="ada")) == [("acme/ada", 300)]
        [unpriced] = run(stores.usage.report(UsageFilter(), UsageGroup.MODEL))[:1]
        assert unpriced.total.known_cost is None and unpriced.total.unpriced_calls == 1

    def test_no_namesake_in_another_chain_is_counted(self, stores: Stores) -> None:
        """I11: a sum over a chain that differs by one id holds none of this chain's calls."""
        run(stores.usage.record(turn("t1")))
        for other in namesakes(CHAIN):
            if None not in attrs.astuple(other):  # a missing id is "any" in a sum, so it would cover the chain
                where = UsageFilter(other.company_id, other.org_id, other.team_id, other.project_id, other.user_id, other.session_id)
                assert run(stores.usage.total(where)) == UsageTotal()

    def test_usage_survives_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.usage.record(turn("t1", CHAIN, priced(), priced(cost=None))))
        stores.close()
        with open_backend() as again:
            total = run(again.usage.total(UsageFilter(company_id="acme")))
            assert (total.calls, total.unpriced_calls) == (2, 1)
            assert run(again.usage.record(turn("t1"))) is False

    def test_a_reservation_is_added_whole_or_not_at_all(self, stores: Stores) -> None:
        usage = stores.usage
        tenant, session = Charge("tenant/day", 60, 0.5, 100, 1.0), Charge("session/day", 60, 0.5, 1000)
        assert run(usage.reserve([tenant, session])) is None
        assert run(usage.reserve([session, tenant])) == tenant  # 120 tokens would pass the tenant's 100
        assert run(usage.spent("tenant/day")) == Spent(60, 0.5)
        assert run(usage.spent("session/day")) == Spent(60, 0.5)
        assert run(usage.reserve([Charge("tenant/day", 10, 0.6, cost_limit=1.0)])) is not None  # $1.10 > $1
        assert run(usage.spent("never charged")) == Spent()

    def test_a_used_up_line_refuses_even_a_charge_of_nothing(self, stores: Stores) -> None:
        usage = stores.usage
        assert run(usage.reserve([Charge("k", 100, 0.0, 100)])) is None
        assert run(usage.reserve([Charge("k", 0, 0.0, 100)])) is not None
        assert run(usage.reserve([Charge("k", 0, 0.0, 101)])) is None

    def test_spending_settles_a_reservation_whatever_the_limits(self, stores: Stores) -> None:
        usage = stores.usage
        run(usage.reserve([Charge("k", 50, 0.25, 100)]))
        run(usage.spend([Charge("k", -20, -0.125)]))  # the call used less than it reserved
        run(usage.spend([Charge("k", 500, 1.0)]))
        assert run(usage.spent("k")) == Spent(530, 1.125)

    def test_of_reservations_made_at_once_none_passes_the_limit(self, stores: Stores) -> None:
        """I16: concurrent reservations of one line take it to its limit and never beyond."""
        taken = at_once(lambda _: stores.usage.reserve([Charge("tenant/day", 7, 0.0, 100)]), range(40))
        assert taken.count(None) == 14
        assert run(stores.usage.spent("tenant/day")) == Spent(98, 0.0)
