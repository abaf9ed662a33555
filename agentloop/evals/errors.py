"""The errors of evaluations: a dataset that does not load, a baseline report that does not read."""

from __future__ import annotations

from agentloop.errors import AgentloopError


class DatasetError(ValueError, AgentloopError):
    """A dataset file that cannot be read or does not follow the dataset schema; the message
    names the file, the case and the field."""


class BaselineError(ValueError, AgentloopError):
    """A `--baseline` file that is not a report written by `agentloop eval --json`."""
