"""Steps of serving.feature for the OpenAI API, spoken to with the official `openai` SDK."""

from __future__ import annotations

from typing import Any

import openai
from pytest_bdd import parsers, then, when

from serve_kit import ALICE, BOB, auth

_TOKENS = {"alice": ALICE, "bob": BOB}


def _ask(bot: Any, who: str, text: str, session: str | None) -> None:
    client = openai.OpenAI(base_url=f"{bot.client().base_url}/openai/v1", api_key=_TOKENS[who], max_retries=0)
    metadata = {} if session is None else {"metadata": {"session_id": session}}
    try:
        bot.openai = client.chat.completions.create(model="bot", messages=[{"role": "user", "content": text}], **metadata)
    except openai.APIStatusError as error:
        bot.openai = error


@when(parsers.parse('{who} asks through the OpenAI API "{text}"'))
def _first(bot: Any, who: str, text: str) -> None:
    _ask(bot, who, text, None)
    bot.session = bot.openai.metadata["session_id"]


@when(parsers.parse('{who} asks through the OpenAI API "{text}" in the same session'))
@when(parsers.parse('{who} asks through the OpenAI API "{text}" in alice\'s session'))
def _again(bot: Any, who: str, text: str) -> None:
    _ask(bot, who, text, bot.session)


@then(parsers.parse('the OpenAI answer is "{text}"'))
def _answer(bot: Any, text: str) -> None:
    assert bot.openai.choices[0].message.content == text


@then(parsers.parse("the session's history through the native API is {texts}"))
def _history(bot: Any, texts: str) -> None:
    shown = bot.client().get(f"/v1/sessions/{bot.session}/messages", headers=auth(ALICE)).json()["messages"]
    assert [message["text"] for message in shown] == [text.strip().strip('"') for text in texts.split(",")]


@then(parsers.parse('the OpenAI API answers {status:d} with the code "{code}"'))
def _refused(bot: Any, status: int, code: str) -> None:
    assert isinstance(bot.openai, openai.APIStatusError)
    assert bot.openai.status_code == status and bot.openai.body["code"] == code
