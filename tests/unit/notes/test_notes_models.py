"""Note-taking models: layers and tenant chains, trajectory hashes, knowledge items."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from agentloop import Session
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteType, Trajectory
from agentloop.testing.notes import make_execution, make_executions


def test_layers_go_from_broad_to_narrow_and_narrow_wins_ties() -> None:
    assert Layer.TEAM.with_parents() == (Layer.COMPANY, Layer.ORG, Layer.TEAM)
    assert sorted(Layer, key=lambda layer: layer.precedence) == [Layer.PROJECT, Layer.TEAM, Layer.ORG, Layer.COMPANY]


def test_a_chain_sees_its_own_layers_and_nothing_of_another_tenant() -> None:
    caller = LayerIds.of_session(Session("s", org_id="o1", team_id="t1", project_id="p1"))
    visible = caller.visible_owners()
    assert caller in visible and caller.truncated(Layer.ORG) in visible and LayerIds() in visible
    assert LayerIds("default", "o1", "t1", "p2") not in visible
    assert LayerIds("default", "o2", "t1") not in visible
    assert caller not in caller.visible_owners(Layer.TEAM)
    assert LayerIds(org_id="o1").visible_owners() == {LayerIds(), LayerIds(org_id="o1")}
    assert caller.narrowest() is Layer.PROJECT
    assert LayerIds(org_id="o1").narrowest() is Layer.ORG


def test_truncating_to_a_layer_without_an_id_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a team id"):
        LayerIds(org_id="o1").truncated(Layer.TEAM)


def test_the_trajectory_hash_is_about_content_not_ids_or_times() -> None:
    first = make_executions(["search", "read", "edit"])
    later = make_executions(["search", "read", "edit"], start=datetime(2027, 5, 5, tzinfo=UTC), session_id="s2")
    assert Trajectory("s", tuple(first)).content_hash == Trajectory("s2", tuple(later)).content_hash
    changed = [*first[:2], make_execution("edit", arguments={"query": "other"})]
    assert Trajectory("s", tuple(changed)).content_hash != Trajectory("s", tuple(first)).content_hash


def test_nesting_is_part_of_the_hash() -> None:
    root = make_execution("plan")
    nested = make_execution("run", parent_id=root.id)
    flat = make_execution("run")
    assert Trajectory("s", (root, nested)).content_hash != Trajectory("s", (root, flat)).content_hash


def test_duration_runs_from_first_start_to_last_finish() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    runs = (
        make_execution(started_at=start, duration_ms=1000),
        make_execution(started_at=start + timedelta(seconds=40), duration_ms=2500),
    )
    assert Trajectory("s", runs).duration_s == pytest.approx(42.5)


def test_an_item_carries_only_the_ids_of_its_layer_and_parents() -> None:
    ids = LayerIds("default", "o1", "t1", "p1")
    with pytest.raises(ValueError, match="only the ids of its layer"):
        KnowledgeItem(NoteType.PATTERN, Layer.TEAM, ids, "t", "md", np.ones(4), datetime(2026, 1, 1, tzinfo=UTC))
    item = KnowledgeItem(
        NoteType.PATTERN, Layer.TEAM, ids.truncated(Layer.TEAM), "t", "md", np.ones(4), datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert item.usefulness_ratio == 0.0
    with pytest.raises(ValueError, match="has no id yet"):
        _ = item.key
