"""Speech adapters: the embedded synthesizer on Debian's espeak-ng, and the OGG/Opus encoding voice messages take."""
