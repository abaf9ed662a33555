"""What A2A messages carry, read and written: the text and decision of a user's message, and a running turn's
events (deltas, resets, the outcome) as the task's artifact and status updates."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from a2a.server.events import Event
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import ContentTypeNotSupportedError
from google.protobuf import json_format, struct_pb2

from agentloop._names import new_id

if TYPE_CHECKING:
    from agentloop.serve.protocols.a2a.handler import Record

ANSWER = "answer"
"""The id (and name) of a task's one artifact: the bot's answer, streamed as it is written."""
APPROVE_WORDS = frozenset({"approve", "approved", "yes", "allow", "ok"})
"""First words of a text message that approve the call a task awaits."""
DENY_WORDS = frozenset({"deny", "denied", "no", "reject"})
"""First words of a text message that deny it."""
_STATES = {
    "awaiting_approval": TaskState.TASK_STATE_INPUT_REQUIRED,
    "error": TaskState.TASK_STATE_FAILED,
    "deadline": TaskState.TASK_STATE_FAILED,
}
"""The task state a turn's finish reason leaves it in; any other reason completes it."""


def message_text_of(message: Message) -> str:
    """The text parts of `message`, one after another; data parts are read by `decision`, files are refused."""
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind != "data":
            raise ContentTypeNotSupportedError("this agent takes text (and data parts for decisions), not files; send the text")
    return "\n".join(texts)


def decision(message: Message) -> tuple[bool, str | None] | None:
    """The user's decision in `message` (approved, note): a data part {"approve": bool, "note"?} or a text starting
    with approve/yes or deny/no (the rest is the note); None when it holds none."""
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            value = json_format.MessageToDict(part.data)
            if isinstance(value, dict) and isinstance(value.get("approve"), bool):
                note = value.get("note")
                return value["approve"], note if isinstance(note, str) and note else None
    words = " ".join(part.text for part in message.parts if part.WhichOneof("content") == "text").split(maxsplit=1)
    first = words[0].lower().strip(".,!") if words else ""
    if first in APPROVE_WORDS or first in DENY_WORDS:
        return first in APPROVE_WORDS, words[1] if len(words) > 1 else None
    return None


def progress(record: Record, name: str, data: dict[str, Any]) -> list[Event]:
    """The task's updates for one event of its turn, applied to `record` too."""
    if name == "delta":
        append, record.streamed = record.streamed, True
        return [_answer(record.task, data["text"], append=append, last=False)]
    if name == "reset":
        record.streamed = False
        return [_answer(record.task, "", append=False, last=False)]
    if name == "text":  # a whole message: what was streamed of it, or one sent at once
        record.streamed = True
        if record.task.artifacts and record.task.artifacts[0].parts[0].text == data["text"]:
            return []
        return [_answer(record.task, data["text"], append=False, last=False)]
    if name == "outcome":
        return _finished(record, data)
    return []


def _finished(record: Record, outcome: dict[str, Any]) -> list[Event]:
    """The answer in full (the last chunk) and the final status: completed, failed, or input-required with the call."""
    task = record.task
    events: list[Event] = []
    text = outcome["text"]
    if text:
        events.append(_answer(task, text, append=False, last=True))
    state = _STATES.get(outcome["finish_reason"], TaskState.TASK_STATE_COMPLETED)
    approval = outcome.get("approval")
    if approval is not None:
        record.approval_id = approval["approval_id"]
        asked = f"The bot asks to run the tool {approval['tool']} with {json.dumps(approval['arguments'])}: answer approve or deny."
        said = agent_message(task, f"{text}\n\n{asked}" if text else asked, data=approval)
    elif state == TaskState.TASK_STATE_FAILED:
        said = agent_message(task, "; ".join(outcome["failures"]) or "the bot could not answer this message")
    else:
        said = agent_message(task, text or "")
    task.history.append(said)
    shown = {key: outcome[key] for key in ("turn_id", "finish_reason", "failures", "usage") if outcome.get(key) is not None}
    task.metadata.Clear()
    task.metadata.update(shown)
    task.status.CopyFrom(stamped(TaskStatus(state=state, message=said)))
    events.append(status_of(task))
    return events


def _answer(task: Task, text: str, *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
    """The answer artifact grown by (`append`) or replaced with `text`, on the task and as its update event."""
    if append and task.artifacts:
        task.artifacts[0].parts[0].text += text
    else:
        del task.artifacts[:]
        task.artifacts.append(Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=text)]))
    chunk = Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=text)])
    return TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, artifact=chunk, append=append, last_chunk=last)


def agent_message(task: Task, text: str, *, data: dict[str, Any] | None = None) -> Message:
    """The agent's message in `task`: `text`, and `data` as a data part when given."""
    parts = [Part(text=text)]
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return Message(message_id=new_id(), context_id=task.context_id, task_id=task.id, role=Role.ROLE_AGENT, parts=parts)


def status_of(task: Task) -> TaskStatusUpdateEvent:
    """The task's current status as an update event."""
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)


def stamped(status: TaskStatus) -> TaskStatus:
    """`status` with the time it took effect."""
    status.timestamp.GetCurrentTime()
    return status
