"""The scenarios of welcome.feature; every step but one comes from agentloop.testing.bdd."""

from pytest_bdd import given, parsers, scenarios

scenarios("welcome.feature")


@given(parsers.parse('the bot welcomes with "{text}"'), target_fixture="welcome")
def bot_welcomes_with(text: str) -> str:
    return text
