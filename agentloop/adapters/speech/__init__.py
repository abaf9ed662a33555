"""Speech adapters: the embedded `Synthesizer` on Debian's espeak-ng."""
