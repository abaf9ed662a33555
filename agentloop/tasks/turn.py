"""The contract between the evaluator and an atomic task's turn.

The evaluator runs each atomic task as one auto-mode turn whose `IncomingMessage.text`
is `TaskTurn.render()` and whose turn inputs are the `TaskTurn` itself and its
`TurnPolicy` (`TaskTurn.policy`). The model answers in the reply format below;
`parse_reply` turns `TurnOutcome.assistant_text` into a `TaskResult`.

Retrieval contract: the turn's `TurnPolicy` is never stored (persist=False) and lets
systems that retrieve notes, memory or earlier answers by associative matching do so
only when the template enables fresh_context (fresh_retrieval). Systems read the
policy, never the task types. Everything else the task may see is already in
`TaskTurn`: inherited context, accumulated steps, subtask results, previous notes.

Reply format: the reply is the task's content. To add notes, ask for a subtask or report
failure, the reply ends with a fenced block tagged `task-result` holding one JSON object
with `status` (COMPLETE, CONTINUATION or FAILED; default COMPLETE), `notes` (an object,
kept exactly as written), `subtask` (with CONTINUATION: `{"template": name}` or
`{"description": text}`, plus optional string `inputs`) and `reason` (with FAILED). A reply
without the block is COMPLETE with no notes; a malformed block makes a FAILED result
whose reason is `output_format_failure`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from agentloop.components import PromptSection, TurnPolicy
from agentloop.tasks.results import SubtaskRequest, TaskFailureReason, TaskOutput, TaskResult, TaskStatus

RESULT_FENCE = "```task-result"
REPLY_FORMAT = (
    "Reply with the task's result. To keep notes for later steps, to ask for a subtask first, "
    "or to report that the task failed, end the reply with a block like this:\n"
    f"{RESULT_FENCE}\n"
    '{"status": "COMPLETE", "notes": {}}\n'
    "```\n"
    "status is COMPLETE, CONTINUATION or FAILED. notes is a JSON object. CONTINUATION needs "
    '"subtask": {"template": "<name>", "inputs": {}} or {"description": "<what to do>", "inputs": {}}. '
    'FAILED takes "reason": "<why>".'
)
_BLOCK = re.compile(r"```task-result[ \t]*\r?\n(?P<body>.*)\r?\n```\s*", re.DOTALL)
_FENCE_LINE = re.compile(r"^```task-result", re.MULTILINE)
_REPLY_KEYS = frozenset({"status", "notes", "subtask", "reason"})


def render_notes(notes: Mapping[str, Any]) -> str:
    """Notes as the model sees them: JSON, in their own key order (a view; never stored)."""
    return json.dumps(notes, ensure_ascii=False, default=repr)


def render_outputs(outputs: tuple[TaskOutput, ...]) -> str:
    """Finished steps as the next task sees them: id, notes, and the output if kept."""
    blocks = []
    for entry in outputs:
        lines = [f"### {entry.step_id}", f"Notes: {render_notes(entry.notes)}"]
        if entry.output is not None:
            lines += ["Output:", entry.output]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


@attrs.frozen
class TaskTurn:
    """What one atomic task hands its turn (a turn input component).

    `context` is the inherited context after the task's inherit_context setting (empty
    for none); `history` the earlier steps of the enclosing sequence as accumulated;
    `fresh_context` whether retrieval systems may add notes and memory: the task's own
    setting, or inherited from a parent whose context is fresh (see the evaluator).
    """

    task_name: str
    instruction: str
    context: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    history: tuple[TaskOutput, ...] = ()
    subtask_results: tuple[TaskOutput, ...] = ()
    previous_notes: str | None = None
    fresh_context: bool = False
    depth: int = 0

    def sections(self) -> tuple[PromptSection, ...]:
        """The extra context of the task as prompt sections, in prompt order."""
        sections: list[PromptSection] = []
        if self.context:
            body = "\n\n".join(f"### {key}\n{value}" for key, value in self.context.items())
            sections.append(PromptSection("Inherited Context", body, "task"))
        if self.history:
            sections.append(PromptSection("Previous Steps", render_outputs(self.history), "task"))
        if self.subtask_results:
            sections.append(PromptSection("Subtask Results", render_outputs(self.subtask_results), "task"))
        if self.previous_notes:
            sections.append(PromptSection("Previous Agent Notes", self.previous_notes, "attempt_notes"))
        sections.append(PromptSection("Reply Format", REPLY_FORMAT, "task"))
        return tuple(sections)

    @property
    def policy(self) -> TurnPolicy:
        """How the pipeline treats this turn: stored nowhere (it is not the user's
        conversation), with retrieval only when the task's context is fresh."""
        return TurnPolicy(fresh_retrieval=self.fresh_context, persist=False)

    def render(self) -> str:
        """The prompt of the turn: the instruction, then each section as `## title`."""
        return "\n\n".join([self.instruction, *(f"## {s.title}\n{s.body}" for s in self.sections())])


def format_reply(
    content: str,
    *,
    status: TaskStatus = TaskStatus.COMPLETE,
    notes: Mapping[str, Any] | None = None,
    subtask: SubtaskRequest | None = None,
    reason: str | None = None,
) -> str:
    """A reply in the documented format (for fakes, tests and well-behaved agents)."""
    block: dict[str, Any] = {"status": status.value}
    if notes is not None:
        block["notes"] = notes
    if subtask is not None:
        request: dict[str, Any] = {"inputs": dict(subtask.inputs)}
        request["template" if subtask.template is not None else "description"] = subtask.template or subtask.description
        block["subtask"] = request
    if reason is not None:
        block["reason"] = reason
    return f"{content}\n\n{RESULT_FENCE}\n{json.dumps(block, ensure_ascii=False)}\n```"


def _malformed(content: str, detail: str) -> TaskResult:
    return TaskResult(
        content, TaskStatus.FAILED, reason=TaskFailureReason.OUTPUT_FORMAT_FAILURE, detail=f"malformed task reply: {detail}"
    )


def parse_reply(text: str | None) -> TaskResult:
    """The `TaskResult` a reply stands for; a malformed reply is a FAILED result saying why."""
    if text is None:
        return _malformed("", "the turn produced no assistant text")
    fences = [m.start() for m in _FENCE_LINE.finditer(text)]
    if not fences:
        return TaskResult(text)
    start = fences[-1]
    content = text[:start].rstrip()
    match = _BLOCK.fullmatch(text, start)
    if match is None:
        return _malformed(content, "the task-result block must end the reply and be closed with ```")
    try:
        block = json.loads(match.group("body"))
    except ValueError as exc:
        return _malformed(content, f"the task-result block is not JSON ({exc})")
    if not isinstance(block, dict):
        return _malformed(content, "the task-result block must hold a JSON object")
    unknown = sorted(set(block) - _REPLY_KEYS)
    if unknown:
        return _malformed(content, f"unknown key(s) {', '.join(map(repr, unknown))} in the task-result block")
    try:
        status = TaskStatus(block.get("status", "COMPLETE"))
    except ValueError:
        return _malformed(content, f"status must be COMPLETE, CONTINUATION or FAILED, not {block.get('status')!r}")
    notes = block.get("notes", {})
    if not isinstance(notes, dict):
        return _malformed(content, "notes must be a JSON object")
    subtask = None
    if "subtask" in block:
        if status is not TaskStatus.CONTINUATION:
            return _malformed(content, "a subtask may only be requested with status CONTINUATION")
        parsed = _subtask(block["subtask"])
        if isinstance(parsed, str):
            return _malformed(content, parsed)
        subtask = parsed
    elif status is TaskStatus.CONTINUATION:
        return _malformed(content, "status CONTINUATION needs a subtask request")
    if status is TaskStatus.FAILED:
        reason = block.get("reason")
        detail = reason if isinstance(reason, str) and reason else "the task reported that it failed"
        return TaskResult(content, status, notes, reason=TaskFailureReason.TASK_REPORTED_FAILURE, detail=detail)
    return TaskResult(content, status, notes, subtask=subtask)


def _subtask(raw: object) -> SubtaskRequest | str:
    if not isinstance(raw, dict) or set(raw) - {"template", "description", "inputs"}:
        return 'subtask must be an object with "template" or "description" and optional "inputs"'
    template, description, inputs = raw.get("template"), raw.get("description"), raw.get("inputs", {})
    if (template is None) == (description is None):
        return 'subtask needs exactly one of "template" or "description"'
    if not isinstance(template or description, str) or not (template or description):
        return "the subtask's template or description must be a non-empty string"
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        return "the subtask's inputs must map names to strings"
    return SubtaskRequest(template=template, description=description, inputs=inputs)
