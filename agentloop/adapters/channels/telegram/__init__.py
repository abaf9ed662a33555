"""The Telegram channel, on python-telegram-bot (the `telegram` extra): `TelegramChannel` sends a turn's
response to a chat, `TelegramBot` makes a bot's updates into turns for the chats the chat file lists."""

from agentloop.adapters.channels.telegram.bot import (
    COMMANDS, TelegramBot, TurnRunner, Webhook, direct_turns, inbox_turns, run_until, telegram_application,
)
from agentloop.adapters.channels.telegram.channel import MESSAGE_LIMIT, TelegramChannel, approval_buttons, split_message
from agentloop.adapters.channels.telegram.chats import ChatFileError, ChatOwner, Chats, chat_of, load_chats

__all__ = [
    "COMMANDS",
    "MESSAGE_LIMIT",
    "ChatFileError",
    "ChatOwner",
    "Chats",
    "TelegramBot",
    "TelegramChannel",
    "TurnRunner",
    "Webhook",
    "approval_buttons",
    "chat_of",
    "direct_turns",
    "inbox_turns",
    "load_chats",
    "run_until",
    "split_message",
    "telegram_application",
]
