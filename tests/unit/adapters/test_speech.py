"""The embedded synthesizer on Debian's espeak-ng: a cancelled call leaves no process behind, a missing program is said."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop.adapters.errors import ProgramMissingError
from agentloop.adapters.speech import espeak
from agentloop.adapters.speech.espeak import EspeakSynthesizer
from agentloop.errors import AgentloopError


def test_a_cancelled_synthesis_stops_its_espeak_process(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def recorded(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(espeak.asyncio, "create_subprocess_exec", recorded)

    async def cancelled() -> None:
        speaking = asyncio.create_task(EspeakSynthesizer().synthesize("a long answer read aloud. " * 5000))
        while not started:
            await asyncio.sleep(0.01)
        speaking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await speaking

    asyncio.run(cancelled())
    assert started and started[0].returncode is not None


def test_a_synthesizer_whose_program_is_missing_is_an_agentloop_error_saying_how_to_install_it() -> None:
    """`agentloop telegram --voice espeak` prints it in one line through the CLI's one handler."""
    with pytest.raises(ProgramMissingError, match="apt-get install espeak-ng") as missing:
        EspeakSynthesizer(program="no-such-espeak-program")
    assert isinstance(missing.value, AgentloopError) and isinstance(missing.value, FileNotFoundError)
