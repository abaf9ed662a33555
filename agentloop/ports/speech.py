"""The speech ports: text made into audio for a voice message, and a voice message made into text."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Synthesizer(Protocol):
    """Speaks `text`: returns a WAV file's bytes. Raises `TransportError` when it cannot."""

    async def synthesize(self, text: str) -> bytes: ...


@runtime_checkable
class Transcriber(Protocol):
    """Writes down what a voice message says: `audio` is the file's bytes, `media_type` its type
    (`audio/ogg` for Telegram's voice messages). Raises `TransportError` when it cannot."""

    async def transcribe(self, audio: bytes, media_type: str) -> str: ...
