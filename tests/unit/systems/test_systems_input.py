"""InputSanitizationSystem: control characters out, newlines normalised, long input cut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import Attachment, IncomingMessage, SanitizedInput
from agentloop.testing import make_context, run_system_sync
from systems import InputSanitizationSystem
from systems.input import sanitize


def test_cleans_and_keeps_attachments() -> None:
    file = Attachment("a.txt")
    ctx = make_context(incoming=IncomingMessage("  hi\x00 there\r\nnext\tline\x1b  ", attachments=(file,)))
    run_system_sync(InputSanitizationSystem(), ctx)
    assert ctx.require(SanitizedInput) == SanitizedInput("hi there\nnext\tline", (file,), False)


def test_long_input_is_cut_and_flagged() -> None:
    assert sanitize("x" * 20, 8) == ("x" * 8, True)
    with pytest.raises(ValueError):
        InputSanitizationSystem(max_chars=0)


@settings(deadline=None, max_examples=100)
@given(st.text(), st.integers(1, 50))
def test_sanitized_text_has_no_control_characters_and_fits(text: str, limit: int) -> None:
    cleaned, truncated = sanitize(text, limit)
    assert len(cleaned) <= limit
    assert not any(ord(c) < 32 and c not in "\n\t" for c in cleaned) and "\x7f" not in cleaned
    assert sanitize(cleaned, limit)[0] == cleaned or truncated
