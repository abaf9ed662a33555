"""A bot for the learning-curve example, whose scripted model reads the notes in its prompt.

This shows the mechanics of the learning curve, not a model's learning: the model is a script.
Without a note naming the tool that does the task it explores (searches the docs, looks
things up) before calling that tool; with such a note among "Notes from earlier sessions" it
calls the tool at once. Asked to distil a session, it writes a note naming the tool the
session ended with. Everything else (capture, distillation, retrieval of the note in the
next session of the same project) is agentloop's real note-taking on real stores.

    agentloop eval --learning examples/learning/dataset.yaml \\
        --pipeline examples.learning.bot:learning_bot --out learning-report
"""

from __future__ import annotations

import re

import attrs

from agentloop import tool
from agentloop.adapters import Stores, open_note_taking
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.messages import LlmReply, LlmRequest, Role, ToolCall, Usage
from agentloop.notes import DistillationSettings
from agentloop.ports import Channel
from systems import StandardPipeline, add_note_taking, standard_pipeline

MODEL = "scripted-learner"
NOTES_TITLE = "Notes from earlier sessions"


@attrs.frozen
class Task:
    """A kind of task: the word that names it, the tool that does it and the calls that explore first."""

    word: str
    tool: str
    argument: str
    pattern: str
    """Finds the argument's value in the user's message."""
    exploration: tuple[str, ...]


TASKS = (
    Task("export", "export_table", "table", r"the (\w+) table", ("search_docs", "list_tables", "describe_table")),
    Task("refund", "issue_refund", "order_id", r"(ORD-\d+)", ("search_docs", "lookup_order", "check_refund_policy")),
)


@tool
def search_docs(query: str) -> str:
    """Search the shop's internal documentation."""
    return f"3 pages mention {query!r}; none has a step-by-step answer"


@tool
def list_tables() -> str:
    """List the tables of the shop's database."""
    return "orders, customers, invoices, products"


@tool
def describe_table(table: str) -> str:
    """Describe a table's columns."""
    return f"{table}: id, created_at, and 12 more columns"


@tool
def export_table(table: str) -> str:
    """Export a table of the shop's database to CSV."""
    return f"exported {table} to {table}.csv: 1200 rows"


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: paid, delivered, 49.90 EUR"


@tool
def check_refund_policy(order_id: str) -> str:
    """Say whether an order may be refunded."""
    return f"{order_id} is within the 30-day refund window"


@tool
def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refunded {order_id}: 49.90 EUR"


TOOLS = (search_docs, list_tables, describe_table, export_table, lookup_order, check_refund_policy, issue_refund)


def _usage(request: LlmRequest, reply: str) -> Usage:
    """Tokens as a rough four characters each, so a longer prompt costs more."""
    prompt = sum(len(m.content or "") + 20 * len(m.tool_calls) for m in request.messages)
    return Usage(prompt // 4, len(reply) // 4 + 10)


def _notes(request: LlmRequest) -> str:
    """The notes section of the system prompt, empty when the turn was shown none."""
    system = next((m.content or "" for m in request.messages if m.role is Role.SYSTEM), "")
    return system.partition(NOTES_TITLE)[2]


def _distil(request: LlmRequest) -> str:
    """A note naming the tool the session's last step called: what made the task succeed."""
    steps = re.findall(r"### Step \d+: (\w+)", request.messages[-1].content or "")
    last = steps[-1] if steps else "none"
    task = next((t for t in TASKS if t.tool == last), None)
    kind = task.word if task is not None else "task"
    return (
        f"## Context\nHow to {kind} in the shop: the {last} tool\n\n"
        f"## Solution\nCall {last} at once with the {task.argument if task else 'argument'} from the request; "
        f"searching the docs and looking things up first was not needed.\n\n"
        f"## Key Patterns\n- {last} directly\n\n## Code Examples\nNone\n\n## Tags\n{kind}, {last}\n"
    )


def reply(request: LlmRequest) -> LlmReply:
    """The script: distil when asked to; else explore or, guided by a note naming the tool, call it at once."""
    if not request.tools:
        text = _distil(request)
        return LlmReply(content=text, model=MODEL, usage=_usage(request, text))
    user = next(m.content or "" for m in reversed(request.messages) if m.role is Role.USER)
    task = next((t for t in TASKS if t.word in user.lower()), None)
    called = [call.name for m in request.messages if m.role is Role.ASSISTANT for call in m.tool_calls]
    results = [m.content or "" for m in request.messages if m.role is Role.TOOL]
    if task is None or task.tool in called:
        text = f"Done: {results[-1]}." if results else "I cannot help with that."
        return LlmReply(content=text, model=MODEL, usage=_usage(request, text))
    plan = (task.tool,) if task.tool in _notes(request) else (*task.exploration, task.tool)
    step = next(name for name in plan if name not in called)
    found = re.search(task.pattern, user)
    value = found.group(1) if found else ""
    arguments = {"query": user} if step == "search_docs" else {} if step == "list_tables" else {task.argument: value}
    call = ToolCall(f"call_{len(called) + 1}", step, arguments)
    return LlmReply(tool_calls=(call,), model=MODEL, usage=_usage(request, str(arguments)))


def learning_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The factory the learning run builds each time: `--pipeline examples.learning.bot:learning_bot`.

    Its sessions take no time on a real clock, so note-taking distils sessions of any length;
    the learning run closes the note-taking when it ends.
    """
    model = ScriptedLLM(reply, model=MODEL)
    note_taking = open_note_taking(stores, model, distillation=DistillationSettings(min_duration_s=0))
    note_taking.recorder.start()
    return add_note_taking(standard_pipeline(model, channel, stores=stores, tools=TOOLS), note_taking)

