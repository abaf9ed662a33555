"""Channels: the terminal, and the recording channel that tests and the demo read back."""
