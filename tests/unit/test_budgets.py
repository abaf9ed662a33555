"""`Budgets`: read from `--budget` values, keyed per scope and period, and given to a built bot's tool loop."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentloop import BudgetLimit, Budgets, BudgetScope, BudgetSpecError, Scope
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.bots import BotError, apply_budgets
from agentloop.cli import main
from agentloop.cli._options import budgets_of
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
    with pytest.raises(BudgetSpecError):
        budgets_of(argparse.Namespace(budget=[spec]))


@pytest.mark.parametrize("spec", ["session-daily-cost=0", "turn-tokens=-5", "tenant-monthly-tokens=nan", "turn-tokens=inf"])
def test_a_budget_must_be_a_number_above_zero_and_says_so_as_a_budget_spec_error(spec: str) -> None:
    """The CLI's one `except AgentloopError` prints it: a plain ValueError here was once re-wrapped by hand."""
    with pytest.raises(BudgetSpecError, match=f"--budget '{spec}': the amount must be a number above zero"):
        Budgets.parse([spec])


def test_a_budget_that_does_not_read_is_one_line_from_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` reads its budgets before it opens anything, so no token file or model is needed to see the message."""
    assert main(["serve", "--data-dir", str(tmp_path), "--tokens", str(tmp_path / "tokens.json"), "--budget", "tenant-daily-cost=five"], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == "agentloop: --budget 'tenant-daily-cost=five': the amount after '=' must be a number, as in tenant-daily-cost=5.00\n"


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
        guard = pipeline.get(CompactionSystem).guard  # its summariser calls are checked by the same budgets
        assert guard is not None and guard.budgets == budgets and guard.usage is pipeline.stores.usage
    own = AgentLoop([ToolLoopSystem(ScriptedLLM())])  # made without a usage store
    with pytest.raises(BotError, match="usage store"):
        apply_budgets(own, budgets)
