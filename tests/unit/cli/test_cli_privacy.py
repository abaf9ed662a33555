"""`agentloop stores erase` and `agentloop stores export`: a user's data out as JSON, then gone, audited."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.cli import main
from agentloop.scopes import Scope
from agentloop.testing.stores.erasure import remember

ADA = Scope("acme", "o1", "t1", "p1", "ada", "s1")
BOB = Scope("acme", "o1", "t1", "p1", "bob", "s2")
WHO = ("--company", "acme", "--org", "o1", "--user", "ada", "--actor", "dpo@acme")


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_export_writes_the_users_rows_as_one_json_array_and_erase_leaves_an_empty_one(tmp_path: Path) -> None:
    with open_stores(tmp_path, embedder=HashingEmbedder(dim=64)) as stores:
        asyncio.run(remember(stores, ADA, "adaword"))
        asyncio.run(remember(stores, BOB, "bobword"))
    status, text = run_cli("stores", "export", str(tmp_path), *WHO)
    records = json.loads(text)
    assert status == 0 and "adaword" in text and "bobword" not in text
    assert {record["store"] for record in records} >= {"sessions", "memory", "rag", "usage", "approvals", "trajectories"}
    status, text = run_cli("stores", "erase", str(tmp_path), *WHO)
    assert status == 0 and "sessions: 2" in text and "erased" in text
    assert json.loads(run_cli("stores", "export", str(tmp_path), *WHO)[1]) == []
    bobs = json.loads(run_cli("stores", "export", str(tmp_path), "--company", "acme", "--org", "o1", "--user", "bob")[1])
    assert "bobword" in json.dumps(bobs)
    with open_stores(tmp_path, embedder=HashingEmbedder(dim=64)) as stores:
        audit = asyncio.run(stores.audit.records())
    assert [(r.actor, r.action) for r in audit][:3] == [("dpo@acme", "export"), ("dpo@acme", "erase"), ("dpo@acme", "export")]
    assert all("adaword" not in json.dumps(r.subject) + json.dumps(r.counts) for r in audit)


def test_export_and_erase_of_a_user_with_more_rows_than_a_page_end_and_count_each_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolved user is found by several clauses (their rows, their sessions' rows): each page must go on from the
    last one's key whichever clause found its rows, or an export reads the same rows again and never ends."""
    from agentloop.adapters.sqlite import _subjects

    monkeypatch.setattr(_subjects, "PAGE", 2)
    read, rows = _subjects.record, []

    def bounded(*args: Any) -> dict[str, Any]:  # an export that reads rows again fails here rather than hanging
        rows.append(args)
        assert len(rows) < 10_000, "the export keeps reading rows it read already"
        return read(*args)

    monkeypatch.setattr(_subjects, "record", bounded)
    with open_stores(tmp_path, embedder=HashingEmbedder(dim=64)) as stores:
        for turn in range(3):
            asyncio.run(remember(stores, ADA, f"adaword{turn}"))
    status, text = run_cli("stores", "export", str(tmp_path), *WHO)
    records = json.loads(text)
    assert status == 0
    assert sum(record["store"] == "usage" for record in records) == 3
    assert sum(record["store"] == "sessions" for record in records) == 6
    assert len({json.dumps(record, sort_keys=True) for record in records}) == len(records)
    status, text = run_cli("stores", "erase", str(tmp_path), *WHO)
    assert status == 0 and "sessions: 6" in text
