"""The README's twenty-line bot: a custom System and a reply, run for one turn."""

import attrs
from agentloop import AgentContext, AgentLoop, FinishReason, IncomingMessage
from agentloop import OutgoingResponse, Session, System, TurnOutcome

@attrs.frozen
class Greeting:
    text: str

class GreetingSystem(System):
    order, writes = 10, (Greeting,)
    def process(self, ctx: AgentContext) -> None:
        ctx.set(Greeting(f"Hello, {ctx.incoming.text}!"))

class ReplySystem(System):
    order, reads, writes = 50, (Greeting,), (TurnOutcome,)
    def process(self, ctx: AgentContext) -> None:
        text = ctx.require(Greeting).text
        reply = OutgoingResponse.text_only(text)
        ctx.set(TurnOutcome(FinishReason.SUCCESS, assistant_text=text, outgoing_response=reply))

loop = AgentLoop([ReplySystem(), GreetingSystem()])
print(loop.describe())
print(loop.run_turn_sync(Session("demo"), IncomingMessage("Ada")).require(TurnOutcome).assistant_text)
