"""agentloop: bots as an ordered pipeline of typed systems over one turn context."""

from typing import TYPE_CHECKING

from agentloop._deprecated import renamed_names
from agentloop.components import (
    InboxTurn,
    LlmFailure,
    LlmResponse,
    PlanProposal,
    PromptContext,
    PromptSection,
    SanitizedInput,
    StreamedText,
    StructuredOutput,
    ToolExecution,
    ToolExecutions,
    ToolLoopStop,
    TurnPolicy,
)
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import (
    AgentloopError,
    LlmCallError,
    MissingComponentError,
    PipelineError,
    TransportError,
    UndeclaredAccessError,
)
from agentloop.loop import AgentLoop, PipelineDescription, PipelineRow, validate_pipeline
from agentloop.messages import ChatMessage, LlmReply, LlmRequest, ResponseSchema, Role, ToolCall, ToolSpec
from agentloop.outcome import (
    FINISH_REASON_PRIORITY,
    Attachment,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    OutgoingResponse,
    RoutingOutcome,
    TurnOutcome,
    converter,
    resolve_finish_reason,
    visible_text,
)
from agentloop.system import System

__all__ = [
    "FINISH_REASON_PRIORITY",
    "AgentContext",
    "AgentLoop",
    "AgentloopError",
    "Attachment",
    "ChatMessage",
    "FailureEvent",
    "FailureKind",
    "FailureSource",
    "FinishReason",
    "IncomingMessage",
    "InboxTurn",
    "LlmCallError",
    "LlmFailure",
    "LlmResponse",
    "PlanProposal",
    "PromptContext",
    "PromptSection",
    "SanitizedInput",
    "StreamedText",
    "StructuredOutput",
    "ResponseSchema",
    "OutputType",
    "OutputValidationError",
    "ToolExecution",
    "ToolExecutions",
    "ToolLoopStop",
    "LlmReply",
    "LlmRequest",
    "MissingComponentError",
    "OutgoingResponse",
    "PipelineDescription",
    "PipelineError",
    "PipelineRow",
    "Role",
    "RoutingOutcome",
    "Session",
    "System",
    "ToolCall",
    "ToolSpec",
    "TransportError",
    "TurnOutcome",
    "TurnPolicy",
    "UndeclaredAccessError",
    "converter",
    "resolve_finish_reason",
    "validate_pipeline",
    "visible_text",
]

from agentloop.containment import passes_through, running_task  # noqa: E402
from agentloop.errors import ToolArgumentError, ToolDefinitionError  # noqa: E402
from agentloop.tools import Tool, ToolRegistry, VoiceReply, current_execution_id, running_execution, tool  # noqa: E402

__all__ += [
    "Tool", "ToolArgumentError", "ToolDefinitionError", "ToolRegistry", "VoiceReply", "current_execution_id",
    "passes_through", "running_execution", "running_task", "tool",
]

from agentloop.scopes import DEFAULT_COMPANY, Scope, approval_scope, history_scope, knowledge_scope, memory_scope  # noqa: E402

__all__ += ["DEFAULT_COMPANY", "Scope", "approval_scope", "history_scope", "knowledge_scope", "memory_scope"]

from agentloop.approvals import ApprovalDecision, ApprovalPolicy, ApprovalRequest, PendingApproval  # noqa: E402

__all__ += ["ApprovalDecision", "ApprovalPolicy", "ApprovalRequest", "PendingApproval"]

from agentloop.names import new_id  # noqa: E402
from agentloop.text import cap_bytes, storable  # noqa: E402

__all__ += ["cap_bytes", "new_id", "storable"]

from agentloop.messages import Finished, StreamEvent, TextDelta, ToolCallDelta, Usage  # noqa: E402

__all__ += ["Finished", "StreamEvent", "TextDelta", "ToolCallDelta", "Usage"]

from agentloop.streaming import collect, events_of, reply_events  # noqa: E402
from agentloop.structured import OutputType, OutputValidationError  # noqa: E402

__all__ += ["collect", "events_of", "reply_events"]

from agentloop.telemetry import TELEMETRY, Telemetry  # noqa: E402

__all__ += ["TELEMETRY", "Telemetry"]

from agentloop.logging import library_default  # noqa: E402

library_default()

if not TYPE_CHECKING:  # type checkers report the old names, which is the point
    __getattr__ = renamed_names(__name__, {"LlmError": "agentloop.LlmFailure"})
