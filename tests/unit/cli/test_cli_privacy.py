"""`agentloop stores erase` and `agentloop stores export`: a user's data out as JSON, then gone, audited."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

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
