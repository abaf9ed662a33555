"""Shared BDD steps for every feature."""

from agentloop.testing.bdd import *  # noqa: F403  (pytest-bdd step definitions and fixtures)
