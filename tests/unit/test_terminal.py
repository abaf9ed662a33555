"""Text from stores and models made safe for a terminal: what is escaped, what is kept."""

from __future__ import annotations

import asyncio
import io

from hypothesis import given
from hypothesis import strategies as st

from agentloop import Session
from agentloop.adapters.channels.console import ConsoleChannel
from agentloop.terminal import terminal_line, terminal_text

_RUNS_ON_A_TERMINAL = {*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), "\u061c", "\u200e", "\u200f",
                       "\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def test_escape_sequences_and_bidi_overrides_are_shown_as_their_codes() -> None:
    assert terminal_text("\x1b]0;title\x07\x1b[2J\x9b1m\u202eabc\u2066") == "\\x1b]0;title\\x07\\x1b[2J\\x9b1m\\u202eabc\\u2066"


def test_multi_line_text_keeps_newlines_tabs_and_windows_line_ends_but_not_a_lone_carriage_return() -> None:
    assert terminal_text("# Title\r\n\n\t- item\rhidden") == "# Title\n\n\t- item\\x0dhidden"


def test_one_line_text_escapes_newlines_and_tabs_too() -> None:
    assert terminal_line("a\nb\tc\r") == "a\\x0ab\\x09c\\x0d"


def test_plain_unicode_emoji_and_joiners_are_left_alone() -> None:
    text = "Zürich — 東京 👩‍💻 café\u00a0ok"
    assert terminal_text(text) == terminal_line(text) == text


@given(st.text())
def test_no_character_a_terminal_acts_on_survives_except_newline_and_tab(text: str) -> None:
    assert not (set(terminal_text(text)) & (_RUNS_ON_A_TERMINAL - {"\n", "\t"}))
    assert not set(terminal_line(text)) & _RUNS_ON_A_TERMINAL


def test_the_console_channel_shows_a_bots_escape_sequences_escaped() -> None:
    out = io.StringIO()
    channel = ConsoleChannel(out)

    async def answer() -> None:
        await channel.send_text(Session("s"), "hi\x1b[2J\nthere", {})
        message = await channel.open_stream(Session("s"), {})
        await message.delta("\x1b]0;pwned\x07")
        await message.close("\x1b]0;pwned\x07")

    asyncio.run(answer())
    assert out.getvalue() == "bot> hi\\x1b[2J\nthere\nbot> \\x1b]0;pwned\\x07\n"
