"""A scripted model for long sessions: it answers only from what its prompt shows, and its summaries keep every fact."""

from __future__ import annotations

import re

from agentloop import ContextBudget, EstimatedTokens, LlmRequest
from agentloop.compaction import SUMMARY_INSTRUCTIONS
from agentloop.tokens import request_tokens

FACT = re.compile(r"FACT: [^\n.]*")
BUDGET = ContextBudget(window=2_000, answer_reserve=200)


class ForgetfulBot:
    """A scripted model that answers only from what its prompt shows, and a summariser that carries
    every `FACT: ...` of the previous summary and the folded turns forward; it records each prompt's size."""

    def __init__(self, counter: EstimatedTokens) -> None:
        self.counter = counter
        self.sizes: list[int] = []
        self.summaries = 0

    def reply(self, request: LlmRequest) -> str:
        if request.messages[0].content == SUMMARY_INSTRUCTIONS:
            self.summaries += 1
            return "\n".join(dict.fromkeys(FACT.findall(request.messages[1].content or "")))
        self.sizes.append(request_tokens(self.counter, request.messages, request.tools))
        shown = "\n".join(m.content or "" for m in request.messages)
        if "cat" in (request.messages[-1].content or ""):
            found = re.search(r"FACT: my cat is called (\w+)", shown)
            return f"Your cat is called {found.group(1)}." if found else "I do not know."
        return "Noted, " + "and so on " * (len(self.sizes) % 7)
