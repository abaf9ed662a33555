"""A bot that welcomes the user on the first answer of each conversation."""

import attrs

from agentloop import AgentContext, PromptContext, System, TurnOutcome


class WelcomeSystem(System):
    """Puts a welcome in front of the first answer of a conversation.

    It runs once the outcome is final (57) and before the feedback guarantee (59) and
    routing (60), and changes only what is sent: history and memory store the model's
    own answer (`assistant_text`), never the welcome.
    """

    order = 58
    reads = (PromptContext, TurnOutcome)
    writes = (TurnOutcome,)

    def __init__(self, welcome: str = "Welcome!") -> None:
        self.welcome = welcome

    def should_process(self, ctx: AgentContext) -> bool:
        prompt = ctx.get(PromptContext)
        return prompt is not None and len(prompt.messages) == 1  # no history: a new conversation

    def process(self, ctx: AgentContext) -> None:
        outcome = ctx.turn_outcome
        if outcome is None or outcome.fallback or outcome.outgoing_response is None:
            return
        response = outcome.outgoing_response
        if response.text:
            welcomed = attrs.evolve(response, text=f"{self.welcome} {response.text}")
            ctx.set(attrs.evolve(outcome, outgoing_response=welcomed))
