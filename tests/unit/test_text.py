"""Storable text at the boundary, and the byte cap on tool output."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentloop import IncomingMessage, Session
from agentloop._text import cap_bytes, storable
from agentloop.scopes import history_scope, memory_scope
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import standard_pipeline


def test_lone_surrogates_and_nul_become_the_replacement_character() -> None:
    assert storable("report-\udcff.txt") == "report-\ufffd.txt"
    assert storable("a\x00b") == "a\ufffdb"
    assert storable("plain ascii") == "plain ascii"
    assert storable("naïve ☃") == "naïve ☃"


@given(st.text(alphabet=st.characters(codec=None, blacklist_categories=())))
def test_storable_text_always_encodes_and_keeps_every_storable_character(text: str) -> None:
    result = storable(text)
    result.encode("utf-8")
    assert "\x00" not in result and len(result) == len(text)
    assert all(a == b for a, b in zip(text, result, strict=True) if a != "\x00" and not 0xD800 <= ord(a) <= 0xDFFF)


def test_a_user_message_with_a_lone_surrogate_and_a_nul_is_kept_in_history_and_memory(tmp_path: Path) -> None:
    session = Session("s1", user_id="ada")
    with standard_pipeline(ScriptedLLM(["Noted."]), RecordingChannel(), data_dir=tmp_path) as pipeline:
        ctx = pipeline.build().run_turn_sync(session, IncomingMessage("file \udcff.txt\x00 is gone"))
        stores = pipeline.stores
        assert stores is not None
        (user, answer) = asyncio.run(stores.sessions.recent(history_scope(session), 10))
        assert user.content == "file \ufffd.txt is gone" and answer.content == "Noted."
        (entry,) = asyncio.run(stores.memory.recent(memory_scope(session), 10))
        assert entry.user_text == "file \ufffd.txt is gone"
    assert ctx.failures == ()


def test_text_within_the_cap_is_left_alone() -> None:
    assert cap_bytes("short", 64) == "short"
    assert cap_bytes("é" * 32, 64) == "é" * 32


def test_text_over_the_cap_is_cut_on_a_character_boundary_and_the_cut_is_marked() -> None:
    capped = cap_bytes("x" * 50_000_000, 64 * 1024)
    kept, marker = capped.split("\n…", 1)
    assert kept == "x" * 65536 and marker == "[cut: 50,000,000 bytes, 64 KB kept]"
    cut = cap_bytes("é" * 100, 101)
    assert cut.startswith("é" * 50 + "\n…[cut: 200 bytes, 101 bytes kept]")
