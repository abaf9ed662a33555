"""`agentloop telegram` as a user runs it: a process answering a Telegram bot's chats, by long polling or a webhook."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx
import soundfile

from agentloop.testing.http import free_port
from agentloop.testing.telegram_server import FakeBotApi
from agentloop.adapters import open_stores
from agentloop.adapters.channels.telegram import load_chats
from agentloop.scopes import history_scope
from telegram_kit import ALICE_CHAT, STRANGER_CHAT, telegram_command


def test_the_command_answers_a_listed_chat_by_long_polling_refuses_another_and_stops_on_sigterm(tmp_path: Path) -> None:
    with FakeBotApi() as api:
        with telegram_command(api, tmp_path) as run:
            api.user_says(STRANGER_CHAT, "hi")
            api.user_says(ALICE_CHAT, "hi")
            api.wait_for(lambda: bool(api.texts(STRANGER_CHAT)) and api.texts(ALICE_CHAT) == ["echo: hi"])
        assert run.first_line.endswith("answering by long polling; SIGTERM stops it\n")
        assert run.returncode == 0, run.stderr
        assert run.stdout.endswith(": stopped\n")
        assert "may not talk to this bot" in api.texts(STRANGER_CHAT)[0]


def test_the_command_speaks_voice_replies_with_espeak_as_audio_a_decoder_accepts(tmp_path: Path) -> None:
    with FakeBotApi() as api:
        with telegram_command(api, tmp_path, "--voice", "espeak") as run:
            api.user_says(ALICE_CHAT, "speak the weather is fine")
            api.wait_for(lambda: any(m.kind == "voice" for m in api.chat(ALICE_CHAT)))
        assert run.returncode == 0, run.stderr
        voice = next(m for m in api.chat(ALICE_CHAT) if m.kind == "voice")
        assert voice.data is not None
        samples, rate = soundfile.read(io.BytesIO(voice.data))
        assert rate == 48000 and len(samples) > rate // 2


def test_the_command_takes_updates_at_its_webhook_with_the_secret_telegram_sends(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram-updates"
    secret = "a-webhook-secret-0123456789"
    with FakeBotApi() as api:
        with telegram_command(api, tmp_path, "--webhook", url, "--port", str(port), env={"TELEGRAM_WEBHOOK_SECRET": secret}) as run:
            api.wait_for(lambda: api.webhook == url)
            assert api.webhook_secret == secret
            assert httpx.post(url, json={"update_id": 1}).status_code == 403  # a post without the secret is not Telegram's
            api.user_says(ALICE_CHAT, "hi by webhook")
            api.wait_for(lambda: api.texts(ALICE_CHAT) == ["echo: hi by webhook"])
        assert run.first_line.endswith(f"answering by webhook {url}; SIGTERM stops it\n")
        assert run.returncode == 0, run.stderr
        assert "getUpdates" not in api.calls


def test_two_runners_given_the_same_updates_answer_each_message_once_and_write_its_history_once(tmp_path: Path, postgres_url: str) -> None:
    """I9: one reply per message; I13: history written once; across two runners on one inbox that both receive every update."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}/updates" for port in ports]
    said = ["one", "two", "three"]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with FakeBotApi(every_webhook=True) as api:
        with (
            telegram_command(api, tmp_path / "a", "--stores", postgres_url, "--webhook", urls[0], "--port", str(ports[0])) as first,
            telegram_command(api, tmp_path / "b", "--stores", postgres_url, "--webhook", urls[1], "--port", str(ports[1])) as second,
        ):
            api.wait_for(lambda: sorted(api.webhooks) == sorted(urls))
            for text in said:
                api.user_says(ALICE_CHAT, text)
            api.wait_for(lambda: api.pending() == 0 and len(api.texts(ALICE_CHAT)) == len(said), timeout=60)
        assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
        assert "through the inbox" in first.first_line
        assert api.texts(ALICE_CHAT) == [f"echo: {text}" for text in said]
        session = load_chats(tmp_path / "a" / "chats.toml").session(ALICE_CHAT, ALICE_CHAT)
        assert session is not None
        with open_stores(postgres_url, bot="bot") as stores:
            history = asyncio.run(stores.sessions.recent(history_scope(session), 100))
        assert [message.content for message in history] == [part for text in said for part in (text, f"echo: {text}")]
