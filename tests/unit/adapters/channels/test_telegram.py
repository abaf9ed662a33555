"""The Telegram channel end to end: python-telegram-bot's real code path against a local Bot API server,
checked by what the user's chat shows."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import soundfile

from agentloop.adapters.channels.telegram import split_message
from agentloop.adapters.speech.espeak import EspeakSynthesizer
from agentloop.adapters.channels.telegram._voice import ogg_opus
from agentloop.testing.telegram_server import FakeBotApi
from agentloop.testing import ScriptedLLM
from telegram_kit import ALICE_CHAT, LONG_ANSWER, PNG, STRANGER_CHAT, KnownWords, answer, deleted, running_bot


def test_a_listed_chat_gets_the_answer_to_its_message(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "hello there")
            await api.until(lambda: api.texts(ALICE_CHAT) == ["echo: hello there"])

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert "getUpdates" in api.calls


def test_a_chat_the_file_does_not_list_is_told_so_and_nothing_runs(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(STRANGER_CHAT, "delete everything")
            await api.until(lambda: bool(api.texts(STRANGER_CHAT)))
            api.user_says(ALICE_CHAT, "hi")
            await api.until(lambda: bool(api.texts(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert api.texts(STRANGER_CHAT) == [f"This chat may not talk to this bot. Ask its operator to add chat {STRANGER_CHAT} to the bot's chat file."]
        assert api.texts(ALICE_CHAT) == ["echo: hi"]


def test_a_long_answer_is_split_into_messages_between_paragraphs(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "long")
            await api.until(lambda: "\n\n".join(api.texts(ALICE_CHAT)) == LONG_ANSWER)

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        shown = api.texts(ALICE_CHAT)
        assert len(shown) == 3 and all(len(text) <= 4096 for text in shown)
        assert all(text.startswith("Paragraph") and text.endswith("word") for text in shown)


def test_split_message_cuts_between_paragraphs_then_lines_then_words() -> None:
    assert split_message("one\n\ntwo", limit=5) == ["one", "two"]
    assert split_message("aa bb\ncc", limit=6) == ["aa bb", "cc"]
    assert split_message("aaa bbb", limit=5) == ["aaa", "bbb"]
    assert split_message("abcdefgh", limit=3) == ["abc", "def", "gh"]
    assert split_message("   ") == []


def test_good_bad_and_end_are_answered_in_the_chat(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            for said, count in (("/good", 1), ("hi", 2), ("/bad", 3), ("/end", 4), ("/good", 5)):
                api.user_says(ALICE_CHAT, said)
                await api.until(lambda: len(api.texts(ALICE_CHAT)) == count)  # noqa: B023 - awaited in the loop

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert api.texts(ALICE_CHAT) == [
            "Nothing to rate yet: /good and /bad rate my last answer.",
            "echo: hi",
            "Thanks: feedback recorded (bad).",
            "Session ended; your next message starts a new one.",
            "Nothing to rate yet: /good and /bad rate my last answer.",
        ]


def test_an_approval_request_comes_with_buttons_and_a_press_runs_the_call(tmp_path: Path) -> None:
    deleted.clear()

    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "delete notes.txt")
            await api.until(lambda: any(m.buttons for m in api.chat(ALICE_CHAT)))
            asked = next(m for m in api.chat(ALICE_CHAT) if m.buttons)
            assert [label for label, _ in asked.buttons] == ["Approve", "Deny"]
            assert deleted == []
            api.user_presses(ALICE_CHAT, asked.message_id, asked.buttons[0][1])
            await api.until(lambda: "done: deleted notes.txt" in api.texts(ALICE_CHAT))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert deleted == ["notes.txt"]
        assert len(api.answered_callbacks) == 1
        asked = next(m for m in api.chat(ALICE_CHAT) if m.text and m.text.startswith("Before I run delete_file(path='notes.txt')"))
        assert asked.buttons == [] and asked.text.endswith("\nApproved")


def test_deny_as_a_command_answers_the_waiting_call_without_running_it(tmp_path: Path) -> None:
    deleted.clear()

    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "delete notes.txt")
            await api.until(lambda: any(m.buttons for m in api.chat(ALICE_CHAT)))
            before = len(api.texts(ALICE_CHAT))
            api.user_says(ALICE_CHAT, "/deny not now")
            await api.until(lambda: len(api.texts(ALICE_CHAT)) > before)

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert deleted == []
        assert api.texts(ALICE_CHAT)[-1].startswith("done: ")


def test_a_voice_reply_is_a_voice_message_whose_audio_decodes(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data", synthesizer=EspeakSynthesizer()):
            api.user_says(ALICE_CHAT, "speak good morning")
            await api.until(lambda: any(m.kind == "voice" for m in api.chat(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        voice = next(m for m in api.chat(ALICE_CHAT) if m.kind == "voice")
        assert voice.data is not None
        info = soundfile.info(io.BytesIO(voice.data))
        samples, rate = soundfile.read(io.BytesIO(voice.data))
        assert (info.format, info.subtype, rate) == ("OGG", "OPUS", 48000)
        assert len(samples) > rate // 4 and abs(samples).max() > 0.01  # a spoken phrase, not silence


def test_voice_text_without_a_synthesizer_is_sent_as_text(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "speak good morning")
            await api.until(lambda: "good morning" in api.texts(ALICE_CHAT))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert [m.kind for m in api.chat(ALICE_CHAT)] == ["text"] * len(api.chat(ALICE_CHAT))


def test_a_voice_message_is_transcribed_into_a_turn(tmp_path: Path) -> None:
    transcriber = KnownWords("what time is it")
    spoken = ogg_opus(asyncio.run(EspeakSynthesizer().synthesize("what time is it")))

    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data", transcriber=transcriber):
            api.user_speaks(ALICE_CHAT, spoken)
            await api.until(lambda: api.texts(ALICE_CHAT) == ["echo: what time is it"])

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert transcriber.heard == [spoken]


def test_a_voice_message_without_a_transcriber_is_answered_with_a_request_to_type(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_speaks(ALICE_CHAT, b"OggS")
            await api.until(lambda: bool(api.texts(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert api.texts(ALICE_CHAT) == ["I cannot understand voice messages here; please type your message."]


def test_a_file_a_tool_returns_is_sent_as_a_document(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "report")
            await api.until(lambda: any(m.kind == "document" for m in api.chat(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        document = next(m for m in api.chat(ALICE_CHAT) if m.kind == "document")
        assert (document.file_name, document.data) == ("report.csv", b"day,sales\nmon,3\n")


def test_an_image_a_tool_returns_is_sent_as_a_photo(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_says(ALICE_CHAT, "chart")
            await api.until(lambda: any(m.kind == "photo" for m in api.chat(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        photo = next(m for m in api.chat(ALICE_CHAT) if m.kind == "photo")
        assert photo.data == PNG


def test_a_streamed_answer_is_one_message_edited_as_it_grows(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data", llm=ScriptedLLM(answer, chunk=4, pace=0.02)):
            api.user_says(ALICE_CHAT, "a streamed answer grows")
            await api.until(lambda: api.texts(ALICE_CHAT) == ["echo: a streamed answer grows"])

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        [message] = api.chat(ALICE_CHAT)
        assert message.edits >= 2
        assert api.calls.count("sendMessage") == 1


def test_edits_are_rate_limited_so_with_no_time_passing_the_message_is_edited_once_to_its_final_text(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data", llm=ScriptedLLM(answer, chunk=4), edit_interval=1.0, clock=lambda: 0.0):
            api.user_says(ALICE_CHAT, "a streamed answer grows")
            await api.until(lambda: api.texts(ALICE_CHAT) == ["echo: a streamed answer grows"])

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        [message] = api.chat(ALICE_CHAT)
        assert message.edits == 1
        assert api.calls.count("editMessageText") == 1


def test_a_document_the_user_sends_goes_with_the_turn_and_its_caption_is_the_text(tmp_path: Path) -> None:
    async def scenario(api: FakeBotApi) -> None:
        async with running_bot(api, tmp_path / "data"):
            api.user_sends_file(ALICE_CHAT, b"buy milk", "notes.txt", "text/plain", caption="read this")
            await api.until(lambda: bool(api.texts(ALICE_CHAT)))

    with FakeBotApi() as api:
        asyncio.run(scenario(api))
        assert api.texts(ALICE_CHAT) == ["echo: read this\n\n[attached: notes.txt (text/plain)]"]
