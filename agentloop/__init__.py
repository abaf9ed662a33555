"""agentloop: bots as an ordered pipeline of typed systems over one turn context.

Importing agentloop configures nothing global: its log events go to the standard `logging`
module (loggers named `agentloop...`) until an application configures structlog or calls
`agentloop.logging.configure_logging`.
"""

from typing import TYPE_CHECKING

from agentloop._deprecated import renamed_names
from agentloop.approvals import APPROVAL_HINT, ApprovalDecision, ApprovalPolicy, ApprovalRequest, PendingApproval
from agentloop.compaction import ContextBudget
from agentloop.components import (
    CallUsage,
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
    TurnUsage,
)
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import (
    AgentloopError,
    LlmCallError,
    MissingComponentError,
    PipelineError,
    ToolArgumentError,
    ToolDefinitionError,
    TransportError,
    TurnInProgressError,
    UndeclaredAccessError,
)
from agentloop.loop import AgentLoop, PipelineDescription, PipelineRow, validate_pipeline
from agentloop.mid_turn import Interruption, MidTurnPolicy
from agentloop.messages import (
    ChatMessage,
    Finished,
    LlmReply,
    LlmRequest,
    ModelSwitched,
    ResponseSchema,
    Role,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
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
from agentloop.budgets import BudgetLimit, BudgetScope, Budgets, BudgetSpecError
from agentloop.pricing import ModelPrice, Prices
from agentloop.scopes import DEFAULT_COMPANY, Scope, approval_scope, history_scope, knowledge_scope, memory_scope
from agentloop.streaming import collect, events_of, reply_events
from agentloop.structured import OutputType, OutputValidationError
from agentloop.system import System
from agentloop.telemetry import TELEMETRY, Telemetry
from agentloop.tokens import EstimatedTokens, TokenCounter, TokenizerTokens
from agentloop.tools import (
    EnclosingTurn,
    Tool,
    ToolRegistry,
    VoiceReply,
    current_execution_id,
    enclosing_turn,
    running_execution,
    tool,
)

__all__ = [
    "APPROVAL_HINT",
    "DEFAULT_COMPANY",
    "FINISH_REASON_PRIORITY",
    "TELEMETRY",
    "AgentContext",
    "AgentLoop",
    "AgentloopError",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Attachment",
    "BudgetLimit",
    "BudgetScope",
    "BudgetSpecError",
    "Budgets",
    "CallUsage",
    "ChatMessage",
    "ContextBudget",
    "EnclosingTurn",
    "EstimatedTokens",
    "FailureEvent",
    "FailureKind",
    "FailureSource",
    "FinishReason",
    "Finished",
    "InboxTurn",
    "IncomingMessage",
    "Interruption",
    "LlmCallError",
    "LlmFailure",
    "LlmReply",
    "LlmRequest",
    "LlmResponse",
    "MidTurnPolicy",
    "MissingComponentError",
    "ModelPrice",
    "ModelSwitched",
    "OutgoingResponse",
    "OutputType",
    "OutputValidationError",
    "PendingApproval",
    "PipelineDescription",
    "PipelineError",
    "PipelineRow",
    "PlanProposal",
    "Prices",
    "PromptContext",
    "PromptSection",
    "ResponseSchema",
    "Role",
    "RoutingOutcome",
    "SanitizedInput",
    "Scope",
    "Session",
    "StreamEvent",
    "StreamedText",
    "StructuredOutput",
    "System",
    "Telemetry",
    "TextDelta",
    "TokenCounter",
    "TokenizerTokens",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinitionError",
    "ToolExecution",
    "ToolExecutions",
    "ToolLoopStop",
    "ToolRegistry",
    "ToolSpec",
    "TransportError",
    "TurnInProgressError",
    "TurnOutcome",
    "TurnPolicy",
    "TurnUsage",
    "UndeclaredAccessError",
    "Usage",
    "VoiceReply",
    "approval_scope",
    "collect",
    "converter",
    "current_execution_id",
    "enclosing_turn",
    "events_of",
    "history_scope",
    "knowledge_scope",
    "memory_scope",
    "reply_events",
    "resolve_finish_reason",
    "running_execution",
    "tool",
    "validate_pipeline",
    "visible_text",
]

if not TYPE_CHECKING:  # type checkers report the old names, which is the point
    __getattr__ = renamed_names(
        __name__,
        {
            "LlmError": "agentloop.LlmFailure",
        },
        internal={
            "cap_bytes": "agentloop._text.cap_bytes",
            "new_id": "agentloop._names.new_id",
            "passes_through": "agentloop._containment.passes_through",
            "running_task": "agentloop._containment.running_task",
            "storable": "agentloop._text.storable",
        },
    )
