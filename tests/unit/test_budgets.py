"""`Budgets`: read from `--budget` values, keyed per scope and period, and given to a built bot's tool loop."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentloop import BudgetLimit, Budgets, BudgetScope, BudgetSpecError, Scope
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.bots import BotError, apply_budgets
from agentloop.cli._options import CliError, budgets_of
from agentloop.loop import AgentLoop
from agentloop.ports import Period
from agentloop.testing import RecordingChannel
from systems import standard_pipeline
from systems.compaction import CompactionSystem
from systems.tool_loop import ToolLoopSystem

AT = datetime(2026, 3, 9, 23, 30, tzinfo=UTC)
CHAIN = Scope("acme", "o1", None, "p1", "ada", "s1")


def test_budget_values_read_as_limits_per_scope_and_period() -> None:
    budgets = Budgets.parse(["turn-tokens=20000", "tenant-daily-cost=5.00", "tenant-daily-tokens=1e6", "session-monthly-tokens=200000"])
    assert budgets == Budgets(
        20000,
        (BudgetLimit(BudgetScope.TENANT, Period.DAY, 1_000_000, 5.0), BudgetLimit(BudgetScope.SESSION, Period.MONTH, 200_000)),
    )
    assert budgets.configured and not Budgets().configured


@pytest.mark.parametrize("spec", ["tenant-daily-cost", "tenant-daily-cost=five", "tenant-weekly-cost=5", "user-daily-cost=5", "turn-cost=1"])
def test_a_budget_value_that_does_not_read_says_what_would(spec: str) -> None:
    with pytest.raises(BudgetSpecError, match="tenant-daily-cost=5.00"):
        Budgets.parse([spec])
    with pytest.raises(CliError):
        budgets_of(argparse.Namespace(budget=[spec]))


def test_a_budget_must_be_above_zero() -> None:
    with pytest.raises(ValueError, match="above zero"):
        Budgets.parse(["session-daily-cost=0"])


def test_a_limit_counts_on_one_ledger_line_per_owner_and_period() -> None:
    tenant_day = BudgetLimit(BudgetScope.TENANT, Period.DAY, cost=5.0)
    session_month = BudgetLimit(BudgetScope.SESSION, Period.MONTH, tokens=100)
    assert tenant_day.key(CHAIN, AT) == "tenant:acme/o1/-/p1:day:2026-03-09"
    assert session_month.key(CHAIN, AT) == "session:acme/s1:month:2026-03"
    assert tenant_day.name == "the tenant's daily budget ($5.00)"
    assert session_month.name == "the session's monthly budget (100 tokens)"


def test_budgets_given_to_a_built_bot_reach_its_tool_loop(tmp_path: Path) -> None:
    budgets = Budgets.parse(["tenant-daily-cost=5"])
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path) as pipeline:
        loop = pipeline.build()
        apply_budgets(loop, budgets)
        tool_loop = pipeline.get(ToolLoopSystem)
        assert tool_loop.settings.budgets == budgets and tool_loop.budget is not None
        guard = pipeline.get(CompactionSystem).budget_guard  # its summariser calls are checked by the same budgets
        assert guard is not None and guard.budgets == budgets and guard.usage is pipeline.stores.usage
    own = AgentLoop([ToolLoopSystem(ScriptedLLM())])  # made without a usage store
    with pytest.raises(BotError, match="usage store"):
        apply_budgets(own, budgets)
