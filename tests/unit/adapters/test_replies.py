"""The reply store a server running turns itself keeps, on both backends, opened through `open_replies`."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from agentloop.adapters.stores import open_replies
from agentloop.ports.replies import Reply


@pytest.fixture(params=["sqlite", "postgresql"])
def replies_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def _keep_and_find(url: str) -> list[Reply | None]:
    first, second = Reply("s1", "d1", {"text": "first"}), Reply("s1", "d2", {"text": "second"})
    async with open_replies(url, bot="helper") as replies:
        await replies.keep("acme/u1", "m1", first)
        await replies.keep("acme/u1", "m1", second)
        found = [await replies.find("acme/u1", "m1"), await replies.find("globex/u1", "m1")]
    async with open_replies(url, bot="other") as replies:
        found.append(await replies.find("acme/u1", "m1"))
    async with open_replies(url, bot="helper") as replies:
        found.append(await replies.find("acme/u1", "m1"))
    return found


def test_a_kept_reply_is_found_in_its_scope_and_bot_only_the_first_stays_and_it_outlives_a_reopen(replies_url: str) -> None:
    first = Reply("s1", "d1", {"text": "first"})
    assert asyncio.run(_keep_and_find(replies_url)) == [first, None, None, first]


def test_the_sqlite_replies_file_is_created_readable_by_its_owner_only(tmp_path: Path) -> None:
    async def body() -> None:
        async with open_replies(f"sqlite:///{tmp_path}", bot="helper") as replies:
            await replies.keep("acme/u1", "m1", Reply("s1", "d1", {}))

    asyncio.run(body())
    assert stat.S_IMODE((tmp_path / "helper.replies.sqlite3").stat().st_mode) == 0o600
