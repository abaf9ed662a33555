"""Scenarios of agents.feature: a bot asked as a tool of another, and a conversation handed between bots."""

from __future__ import annotations

from pytest_bdd import scenarios

from agents_steps import *  # noqa: F403  (the scenario's steps and fixtures)

scenarios("agents.feature")
