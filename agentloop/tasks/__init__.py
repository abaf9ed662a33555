"""XML task templates, context management, the evaluator and notes kept across attempts.

Load templates into a `TemplateRegistry`, run them with an `Evaluator` over an
`AgentLoop`; keep per-task attempt notes with `AttemptNotes` and move tasks through
their lifecycle with `TaskLifecycle`.
"""

from typing import TYPE_CHECKING

from agentloop._deprecated import renamed_names
from agentloop.tasks.errors import (
    ClaimLostError,
    ContextManagementWarning,
    InvalidTaskIdError,
    InvalidTaskTransitionError,
    ResourceExhaustedError,
    ScriptsNotAllowedError,
    TaskError,
    TaskFailedError,
    TemplateError,
    UnknownTaskError,
    UnknownTemplateError,
)
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.tasks.attempt_notes import (
    NOTES_HEADING,
    TAIL_CHARS,
    AttemptNotes,
    count_attempts,
    format_attempt,
    tail,
    validate_task_id,
)
from agentloop.tasks.evaluator import (
    DEFAULT_MAX_CONTINUATIONS,
    DEFAULT_MAX_DEPTH,
    DEFAULT_SCRIPT_TIMEOUT,
    Evaluator,
    InputValue,
    TaskTrace,
    inherited,
    substitute,
)
from agentloop.tasks.lifecycle import DEFAULT_LEASE, AttemptOutcome, AttemptRunner, TaskLifecycle
from agentloop.tasks.loader import (
    DEFAULT_MAX_BYTES,
    MAX_NESTING,
    LoadedTemplates,
    TemplateNotice,
    load_bytes,
    load_file,
    load_string,
    parse_document,
    schema,
)
from agentloop.tasks.registry import TemplateRegistry, ValidationReport, validate_path
from agentloop.tasks.script import DEFAULT_SCRIPT_OUTPUT_LIMIT, refuse_injected_options
from agentloop.tasks.results import (
    SequentialHistory,
    SubtaskRequest,
    TaskFailureReason,
    TaskOutput,
    TaskResult,
    TaskStatus,
)
from agentloop.tasks.settings import (
    OPERATOR_DEFAULTS,
    AccumulationFormat,
    ContextManagement,
    ContextOverrides,
    FreshContext,
    InheritContext,
    Operator,
    Position,
    SettingsCheck,
    SettingsProblem,
    Subtype,
    check,
    defaults_key,
    merge,
    resolve,
)
from agentloop.tasks.template import (
    AtomicTemplate,
    ReduceTemplate,
    ScriptTemplate,
    SequentialTemplate,
    SourceLocation,
    TaskTemplate,
    as_subtask,
)
from agentloop.tasks.turn import (
    REPLY_FORMAT,
    TaskTurn,
    format_reply,
    parse_reply,
    render_notes,
    render_outputs,
)

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CONTINUATIONS",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_SCRIPT_OUTPUT_LIMIT",
    "DEFAULT_SCRIPT_TIMEOUT",
    "MAX_NESTING",
    "NOTES_HEADING",
    "OPERATOR_DEFAULTS",
    "REPLY_FORMAT",
    "TAIL_CHARS",
    "AccumulationFormat",
    "AtomicTemplate",
    "AttemptNotes",
    "AttemptOutcome",
    "AttemptRunner",
    "ClaimLostError",
    "ContextManagement",
    "ContextManagementWarning",
    "ContextOverrides",
    "Evaluator",
    "FreshContext",
    "InheritContext",
    "InputValue",
    "InvalidTaskIdError",
    "InvalidTaskTransitionError",
    "LoadedTemplates",
    "Operator",
    "Position",
    "ReduceTemplate",
    "ResourceExhaustedError",
    "ScriptTemplate",
    "ScriptsNotAllowedError",
    "SequentialHistory",
    "SequentialTemplate",
    "SettingsCheck",
    "SettingsProblem",
    "SourceLocation",
    "SubtaskRequest",
    "Subtype",
    "TaskError",
    "TaskFailedError",
    "TaskFailureReason",
    "TaskLifecycle",
    "TaskOutput",
    "TaskRecord",
    "TaskResult",
    "TaskState",
    "TaskStatus",
    "TaskStore",
    "TaskTemplate",
    "TaskTrace",
    "TaskTurn",
    "TemplateError",
    "TemplateNotice",
    "TemplateRegistry",
    "UnknownTaskError",
    "UnknownTemplateError",
    "ValidationReport",
    "as_subtask",
    "check",
    "count_attempts",
    "defaults_key",
    "format_attempt",
    "format_reply",
    "inherited",
    "load_bytes",
    "load_file",
    "load_string",
    "merge",
    "parse_document",
    "parse_reply",
    "refuse_injected_options",
    "render_notes",
    "render_outputs",
    "resolve",
    "schema",
    "substitute",
    "tail",
    "validate_path",
    "validate_task_id",
]

if not TYPE_CHECKING:  # type checkers report the old names, which is the point
    __getattr__ = renamed_names(
        __name__,
        {"InvalidTaskId": "agentloop.tasks.InvalidTaskIdError", "InvalidTaskTransition": "agentloop.tasks.InvalidTaskTransitionError"},
    )
