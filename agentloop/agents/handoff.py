"""Handoff: several bots share one conversation, each session held by one of them at a time.

    desk = Handoffs(["triage", "billing"], first="triage", sessions=stores.sessions)
    desk.add("triage", triage_loop)    # its tools include desk.transfer_tool("billing", "Invoices and refunds.")
    desk.add("billing", billing_loop)  # its tools include desk.hand_back_tool()
    ctx = await desk.run_turn(session, IncomingMessage("Why was I charged twice?"))

The bot holding the session runs the whole turn, so the user gets its one answer (its routing and
feedback guarantee as ever). A transfer asked for in a turn takes effect after that turn's answer:
it is recorded in the session's history as a line every bot sees, and the target holds the
session from the next message until it hands back or the session ends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar

import attrs

from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import AgentloopError, PipelineError
from agentloop.loop import AgentLoop
from agentloop.messages import ChatMessage, Role
from agentloop.ports.stores import SessionStore
from agentloop.scopes import DEFAULT_COMPANY, history_scope
from agentloop.tools import Tool, tool

__all__ = ["HISTORY_SCANNED", "HandoffError", "Handoffs", "HistoryFilter", "handoff_line"]

HISTORY_SCANNED = 1000
"""How many of a session's latest messages are read to find who holds it."""

HistoryFilter = Callable[[str, Sequence[ChatMessage]], Sequence[ChatMessage]]
"""What the bot `name` holding a session is shown of its history: `(name, history) -> history`."""

_LINE = re.compile(r"^\[handoff from (?P<source>\S+) to (?P<target>\S+)\]")
_SWITCH: ContextVar[_Switch | None] = ContextVar("agentloop_handoff", default=None)


class HandoffError(RuntimeError, AgentloopError):
    """A transfer tool ran outside a `Handoffs` turn, so there is no conversation to hand over."""


def handoff_line(source: str, target: str, reason: str) -> str:
    """The history line that records a transfer: every bot of the session sees it."""
    return f"[handoff from {source} to {target}] {reason}".rstrip()


@attrs.define
class _Switch:
    """The turn running now: which bot holds the session, and the transfer it asked for."""

    holder: str
    target: str | None = None
    reason: str = ""


class Handoffs:
    """The bots `names` that hand one conversation to each other (each built with `add`); a session starts with `first`.

    `sessions` keeps each session's history (the stores the bots share), where transfers are recorded;
    `history_filter` decides what the holding bot is shown of the history (default: all of it, as its
    own pipeline reads it).
    """

    def __init__(
        self,
        names: Iterable[str],
        *,
        first: str,
        sessions: SessionStore,
        company_id: str = DEFAULT_COMPANY,
        history_filter: HistoryFilter | None = None,
    ) -> None:
        self.names = tuple(names)
        if first not in self.names:
            raise PipelineError(f"the first bot {first!r} is not one of the bots ({', '.join(self.names)})")
        self.bots: dict[str, AgentLoop] = {}
        self.first = first
        self.sessions = sessions
        self.company_id = company_id
        self.history_filter = history_filter

    def add(self, name: str, loop: AgentLoop) -> Handoffs:
        """Give the bot `name` its built pipeline (after its tools were made); returns self."""
        if name not in self.names:
            raise PipelineError(f"{name!r} is not one of the bots ({', '.join(self.names)})")
        self.bots[name] = loop
        return self

    def transfer_tool(self, target: str, description: str | None = None) -> Tool:
        """A tool `transfer_to_<target>` that passes the session to the bot `target` after this turn's answer."""
        if target not in self.names:
            raise PipelineError(f"cannot transfer to {target!r}: it is not one of the bots ({', '.join(self.names)})")
        about = f" ({description})" if description else ""

        def transfer(reason: str) -> str:
            """Hand the conversation over.

            Args:
                reason: why, in a few words.
            """
            return self._ask_switch(target, reason)

        text = f"Hand the rest of this conversation to the {target} bot{about}."
        return tool(name=f"transfer_to_{target}", description=text)(transfer)

    def hand_back_tool(self) -> Tool:
        """A tool `hand_back` that passes the session back to the first bot after this turn's answer."""

        def hand_back(reason: str) -> str:
            """Hand the conversation back.

            Args:
                reason: why, in a few words.
            """
            return self._ask_switch(self.first, reason)

        text = f"Hand this conversation back to the {self.first} bot once your part is done."
        return tool(name="hand_back", description=text)(hand_back)

    def _ask_switch(self, target: str, reason: str) -> str:
        switch = _SWITCH.get()
        if switch is None:
            raise HandoffError("a transfer tool ran outside Handoffs.run_turn, so there is no conversation to hand over")
        if target == switch.holder:
            return f"the conversation is already with {target}; answer the user yourself"
        switch.target, switch.reason = target, reason
        return f"after this answer the conversation passes to {target}; tell the user in one sentence that {target} takes it from here"

    async def holder(self, session: Session) -> str:
        """The bot holding `session`: the target of its latest transfer, else the first bot."""
        return self._holder_in(await self.sessions.recent(history_scope(session, self.company_id), HISTORY_SCANNED))

    def _holder_in(self, history: Sequence[ChatMessage]) -> str:
        """The target of the latest transfer in `history`, read each turn as another process may have recorded it."""
        for message in reversed(history):
            matched = _LINE.match(message.content or "") if message.role is Role.ASSISTANT else None
            if matched is not None and matched["target"] in self.names:
                return str(matched["target"])
        return self.first

    async def run_turn(self, session: Session, incoming: IncomingMessage, *, components: Iterable[object] = ()) -> AgentContext:
        """Run the turn on the bot holding `session`; a transfer it asked for is recorded after it."""
        stored = await self.sessions.recent(history_scope(session, self.company_id), HISTORY_SCANNED)
        name = self._holder_in(stored)
        loop = self.bots.get(name)
        if loop is None:
            raise PipelineError(f"the bot {name!r} holds session {session.id!r} but was never added; call add({name!r}, loop)")
        history: Sequence[ChatMessage] = ()
        if self.history_filter is not None:
            history = tuple(self.history_filter(name, stored))
        switch = _Switch(name)
        token = _SWITCH.set(switch)
        try:
            ctx = await loop.run_turn(session, incoming, history=history, components=components)
        finally:
            _SWITCH.reset(token)
        if switch.target is not None:
            line = ChatMessage.assistant(handoff_line(name, switch.target, switch.reason))
            await self.sessions.append(history_scope(session, self.company_id), [line], key=f"{ctx.turn_id}/handoff")
        return ctx

    def run_turn_sync(self, session: Session, incoming: IncomingMessage) -> AgentContext:
        """`run_turn` for scripts and sync tests; not callable from a running event loop."""
        return asyncio.run(self.run_turn(session, incoming))
