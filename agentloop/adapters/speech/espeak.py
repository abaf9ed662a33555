"""`EspeakSynthesizer`: the embedded `Synthesizer`, Debian's `espeak-ng` run as a subprocess, WAV out."""

from __future__ import annotations

import asyncio
import shutil

from agentloop.adapters.errors import ProgramMissingError
from agentloop.errors import TransportError

ESPEAK = "espeak-ng"


class EspeakSynthesizer:
    """Speaks text with the `espeak-ng` program (`apt-get install espeak-ng`) in `voice` at `words_per_minute`.

    The text goes on standard input, never on the command line, so it cannot be read as an option."""

    def __init__(self, *, voice: str = "en", words_per_minute: int = 160, program: str = ESPEAK) -> None:
        found = shutil.which(program)
        if found is None:
            raise ProgramMissingError(f"{program} is not installed; install it with `apt-get install espeak-ng`, or configure no synthesizer")
        self.program = found
        self.voice = voice
        self.words_per_minute = words_per_minute

    async def synthesize(self, text: str) -> bytes:
        process = await asyncio.create_subprocess_exec(
            self.program, "-v", self.voice, "-s", str(self.words_per_minute), "--stdout",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            wav, error = await process.communicate(text.encode("utf-8"))
        except BaseException:  # cancelled (a turn's deadline): the process does not outlive the call
            process.kill()
            await process.wait()
            raise
        if process.returncode != 0 or not wav.startswith(b"RIFF"):
            said = error.decode("utf-8", "replace").strip() or f"exit status {process.returncode}"
            raise TransportError(f"the voice message could not be spoken ({ESPEAK}: {said})")
        return wav
