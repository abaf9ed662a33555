"""WAV to OGG/Opus, the format Telegram's `sendVoice` takes, with soundfile (libsndfile, Opus bundled in its wheel)."""

from __future__ import annotations

import io

from agentloop.errors import TransportError

OPUS_RATE = 48000
"""The sample rate Opus encodes at; libsndfile resamples nothing, so other rates are converted first."""


def ogg_opus(wav: bytes) -> bytes:
    """The audio of the WAV file `wav` as OGG/Opus, mono; `TransportError` when it is no audio soundfile reads."""
    try:
        import numpy as np
        import soundfile
    except ImportError as error:
        raise TransportError(f"voice messages need soundfile: pip install 'agentloop-ecs[telegram]' ({error})") from error
    try:
        samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError) as error:
        raise TransportError(f"the spoken audio could not be read: {error}") from error
    mono = samples.mean(axis=1)
    if rate not in (8000, 12000, 16000, 24000, OPUS_RATE):  # the rates Opus takes as they are
        positions = np.arange(0, len(mono), rate / OPUS_RATE)
        mono, rate = np.interp(positions, np.arange(len(mono)), mono).astype("float32"), OPUS_RATE
    encoded = io.BytesIO()
    soundfile.write(encoded, mono, rate, format="OGG", subtype="OPUS")
    return encoded.getvalue()
