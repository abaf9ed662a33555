"""Notes kept across attempts of one task: one append-only Markdown text per task.

Each attempt appends a section

    ## Attempt N — <agent> (<ISO time>)
    Turns: T | Commits: C

followed by the last 3,000 characters of the attempt's output in a code fence (longer
than any run of backticks in it, so output can never fake a section). The file is read
back into the next attempt's prompt as `## Previous Agent Notes` and deleted only when
the task is accepted as done. Where the text lives is the `AttemptNotesStore`'s
business (by default one file `TASK-<id>.md` per task in the bot's data directory).
"""

from __future__ import annotations

import re

from agentloop._log import get_logger
from agentloop._names import is_safe_name
from agentloop.tasks.errors import InvalidTaskIdError
from agentloop.ports.attempt_notes import AttemptNotesStore
from agentloop.ports.clock import Clock, SystemClock

TAIL_CHARS = 3000
"""How much of an attempt's output is kept: the end, where the summary and final state are."""
NOTES_HEADING = "Previous Agent Notes"

_HEADER = re.compile(r"## Attempt (\d+) — ")
_FENCE = re.compile(r"(`{3,})")
_log = get_logger("agentloop.tasks")


def validate_task_id(task_id: str) -> str:
    """`task_id` if it is safe as a file name part, else `InvalidTaskIdError`."""
    if not is_safe_name(task_id):
        raise InvalidTaskIdError(task_id)
    return task_id


def tail(output: str, limit: int = TAIL_CHARS) -> str:
    """The last `limit` characters, after a marker line saying how much was cut."""
    if len(output) <= limit:
        return output
    return f"[... output truncated: showing the last {limit} of {len(output)} characters ...]\n{output[-limit:]}"


def count_attempts(notes: str) -> int:
    """How many attempt sections `notes` holds (headers inside fenced output do not count)."""
    count = 0
    fence: str | None = None
    for line in notes.splitlines():
        if fence is not None:
            if line.strip() == fence:
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened is not None:
            fence = opened.group(1)
        elif _HEADER.match(line):
            count += 1
    return count


def format_attempt(number: int, agent: str, when: str, output: str, turns: int, commits: int) -> str:
    """One attempt section, ending with a blank line."""
    kept = tail(output)
    longest = max((len(run) for run in re.findall(r"`+", kept)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"## Attempt {number} — {agent} ({when})\nTurns: {turns} | Commits: {commits}\n\n{fence}\n{kept}\n{fence}\n\n"


class AttemptNotes:
    """A task's attempt notes: numbered sections appended after every attempt, kept in `store`."""

    def __init__(self, store: AttemptNotesStore, *, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()

    async def read(self, task_id: str) -> str | None:
        """The task's notes, or None if it has none."""
        return await self.store.read(validate_task_id(task_id))

    async def save(self, task_id: str, *, agent: str, output: str, turns: int, commits: int = 0) -> int:
        """Append this attempt (success or failure) and return its number."""
        if not agent or any(ch in agent for ch in "\r\n"):
            raise ValueError(f"agent name {agent!r} must be one non-empty line")
        number = count_attempts(await self.read(task_id) or "") + 1
        when = self.clock.now().isoformat(timespec="seconds")
        await self.store.append(task_id, format_attempt(number, agent, when, output, turns, commits))
        _log.info("attempt_notes.saved", task_id=task_id, attempt=number, agent=agent, output_chars=len(output))
        return number

    async def remove(self, task_id: str) -> bool:
        """Delete the task's notes; True if there were any."""
        removed = await self.store.remove(validate_task_id(task_id))
        if removed:
            _log.info("attempt_notes.removed", task_id=task_id)
        return removed
