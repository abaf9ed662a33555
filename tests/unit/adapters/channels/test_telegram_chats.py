"""The chat file: which chats and Telegram users a bot answers, as which user and tenant chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.adapters.channels.telegram import ChatFileError, chat_of, load_chats
from agentloop.context import Session

CHATS = """
[[chats]]
chat = 1001
user = "alice"
org = "acme"
project = "helpdesk"

[[chats]]
telegram_user = 77
user = "bob"
org = "globex"
"""


def test_a_listed_chat_is_one_session_of_its_user_and_chain_and_an_unlisted_one_has_none(tmp_path: Path) -> None:
    (tmp_path / "chats.toml").write_text(CHATS)
    chats = load_chats(tmp_path / "chats.toml")
    assert chats.session(1001, 5) == Session("telegram:1001", user_id="alice", project_id="helpdesk", org_id="acme", channel="telegram")
    assert chats.session(1001, 6) == chats.session(1001, 5)  # whoever writes in it
    assert chats.session(2002, 5) is None


def test_a_listed_telegram_user_has_a_session_of_their_own_in_each_chat(tmp_path: Path) -> None:
    (tmp_path / "chats.toml").write_text(CHATS)
    chats = load_chats(tmp_path / "chats.toml")
    in_group, elsewhere = chats.session(-500, 77), chats.session(-600, 77)
    assert in_group is not None and elsewhere is not None
    assert (in_group.id, elsewhere.id, in_group.user_id, in_group.org_id) == ("telegram:-500:77", "telegram:-600:77", "bob", "globex")
    assert chat_of(in_group) == -500


def test_an_ended_session_gives_way_to_a_new_one_in_the_same_chat(tmp_path: Path) -> None:
    (tmp_path / "chats.toml").write_text(CHATS)
    later = load_chats(tmp_path / "chats.toml").session(1001, None, generation=2)
    assert later is not None and later.id == "telegram:1001.2" and chat_of(later) == 1001


def test_a_session_of_another_channel_names_no_chat() -> None:
    with pytest.raises(ValueError, match="is not a Telegram chat's"):
        chat_of(Session("console"))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("chats = []", "lists no chats"),
        ('[[chats]]\nuser = "a"', "needs exactly one of chat or telegram_user"),
        ('[[chats]]\nchat = 1\ntelegram_user = 2\nuser = "a"', "needs exactly one of chat or telegram_user"),
        ('[[chats]]\nchat = "1"\nuser = "a"', "chat is a number"),
        ("[[chats]]\nchat = 1", "needs a user"),
        ('[[chats]]\nchat = 1\nuser = "a"\ntenant = "x"', "unknown keys ['tenant']"),
        ('[[chats]]\nchat = 1\nuser = "a"\n[[chats]]\nchat = 1\nuser = "b"', "chat 1 is listed twice"),
        ('[[chats]]\nchat = 1\nuser = "a"\norg = ""', "non-empty strings"),
        ("chats = [", "is not valid TOML"),
    ],
)
def test_a_chat_file_that_says_something_impossible_is_refused_with_the_fix(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "chats.toml").write_text(text)
    with pytest.raises(ChatFileError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        load_chats(tmp_path / "chats.toml")


def test_a_missing_chat_file_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ChatFileError, match="give --chats the path of a TOML file"):
        load_chats(tmp_path / "absent.toml")
