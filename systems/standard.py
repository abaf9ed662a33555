"""`standard_pipeline(...)`: the standard bot, wired with the embedded defaults and editable by class."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import attrs

from agentloop import (
    DEFAULT_COMPANY,
    AgentContext,
    AgentLoop,
    ApprovalPolicy,
    Budgets,
    ContextBudget,
    EstimatedTokens,
    PipelineDescription,
    PipelineError,
    Prices,
    System,
    TokenCounter,
    Tool,
    TurnOutcome,
)
from agentloop.adapters import Stores, open_stores
from agentloop.ports import LLM, Channel, Clock, Embedder, Metrics

from systems.budgets import BudgetGuard, release_all, release_now
from systems.compaction import CompactionSystem
from systems.context import ContextBuildingSystem
from systems.feedback import FeedbackGuaranteeSystem
from systems.input import InputSanitizationSystem
from systems.memory import MemoryPersistSystem
from systems.outcome import TurnOutcomeFinalizationSystem
from systems.rag import RagIndexingSystem
from systems.routing import ResponseRoutingSystem
from systems.usage import UsageRecordingSystem
from systems.tool_loop import (
    DEFAULT_MAX_TOOL_OUTPUT_BYTES,
    ToolExecutionHook,
    ToolLoopSettings,
    ToolLoopSystem,
    ToolPolicy,
    plan_mode_requested,
)

S = TypeVar("S", bound=System)

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and use the tools when they help."


@attrs.frozen
class StandardOptions:
    """The knobs of the standard pipeline; every field has a working default."""

    history_window: int = 20
    memory_limit: int = 5
    rag_k: int = 3
    rag_min_score: float = 0.2
    max_input_chars: int = 8000
    max_llm_calls: int = 8
    max_tool_executions: int = 16
    plan_mode: bool | Callable[[AgentContext], bool] = plan_mode_requested
    tool_policy: ToolPolicy | None = None
    on_tool_execution: ToolExecutionHook | None = None
    voice: bool = True
    model: str | None = None
    temperature: float | None = None
    turn_timeout: float | None = None
    company_id: str = DEFAULT_COMPANY
    """The deployment's company: every stored row's tenant chain starts with it."""
    max_tool_output_bytes: int = DEFAULT_MAX_TOOL_OUTPUT_BYTES
    """A tool's output beyond this many UTF-8 bytes is cut (and the cut marked) before
    the model or trajectory capture sees it."""
    output_type: type[Any] | None = None
    """Validate the final answer into this type (an attrs class, say); `StructuredOutput` holds it."""
    context_budget: ContextBudget | None = None
    """The model's context window in tokens and how a prompt shares it (history is cut to fit). None:
    `ContextBudget.for_window` of the window the model's server listed (the LLM's `context_window`,
    which the start-up check reads), or of the default window when it listed none."""
    token_counter: TokenCounter | None = None
    """How tokens are counted: a local tokenizer (`TokenizerTokens`), or by default an estimate that learns from usage."""
    compaction: bool = True
    """Fold the turns that no longer fit into a stored per-session summary after each turn's answer."""
    summariser: LLM | None = None
    """The model that writes summaries (default: the bot's)."""
    summary_model: str | None = None
    """The model name asked for summaries (a cheaper one on the same server; default: `model`)."""
    prices: Prices = Prices()
    """What each model's tokens cost: your own prices first, then the genai-prices table."""
    budgets: Budgets = Budgets()
    """Token and cost limits per turn, session and tenant chain per day or month (none by default)."""

    def tool_loop_settings(self, approval: ApprovalPolicy | None = None) -> ToolLoopSettings:
        """The tool loop's share of these options, with the `approval` hook `standard_pipeline` was given."""
        return ToolLoopSettings(
            max_llm_calls=self.max_llm_calls,
            max_tool_executions=self.max_tool_executions,
            plan_mode=self.plan_mode,
            policy=self.tool_policy,
            on_tool_execution=self.on_tool_execution,
            voice=self.voice,
            model=self.model,
            temperature=self.temperature,
            max_tool_output_bytes=self.max_tool_output_bytes,
            output_type=self.output_type,
            approval=approval,
            company_id=self.company_id,
            budgets=self.budgets,
        )


class StandardPipeline:
    """The systems of a bot before it is built: edit them by class, then `build()`.

        pipeline = standard_pipeline(llm, channel, data_dir="data")
        pipeline.insert(GreetingSystem()).remove(RagIndexingSystem)
        loop = pipeline.build()

    `close()` (or `with`) saves and closes the bot's stores (`stores`) if the pipeline
    opened them; stores it was given stay open for their owner to close.
    """

    def __init__(
        self,
        systems: Iterable[System],
        *,
        stores: Stores | None = None,
        owns_stores: bool = False,
        turn_timeout: float | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._systems = list(systems)
        self.stores = stores
        self.owns_stores = owns_stores
        self.turn_timeout = turn_timeout
        self.clock = clock
        self.metrics = metrics

    @property
    def systems(self) -> tuple[System, ...]:
        """The systems in run order."""
        return tuple(sorted(self._systems, key=lambda s: s.order))

    def __iter__(self) -> Iterator[System]:
        return iter(self.systems)

    def __contains__(self, system_type: object) -> bool:
        return isinstance(system_type, type) and any(isinstance(s, system_type) for s in self._systems)

    def get(self, system_type: type[S]) -> S:
        """The system that is a `system_type`; `PipelineError` if there is none."""
        for system in self._systems:
            if isinstance(system, system_type):
                return system
        raise self._missing(system_type)

    def insert(self, system: System) -> StandardPipeline:
        """Add `system`; its `order` places it. Returns self for chaining."""
        if any(s.name == system.name for s in self._systems):
            raise PipelineError(f"the pipeline already has a system named {system.name!r}; use replace() instead")
        self._systems.append(system)
        return self

    def replace(self, system_type: type[System], system: System) -> StandardPipeline:
        """Put `system` where the system that is a `system_type` was."""
        index = self._index(system_type)
        self._systems[index] = system
        return self

    def remove(self, system_type: type[System]) -> StandardPipeline:
        """Drop the system that is a `system_type`."""
        del self._systems[self._index(system_type)]
        return self

    def describe(self) -> PipelineDescription:
        return AgentLoop(self._systems).describe()

    def build(
        self, *, turn_timeout: float | None = None, inputs: Iterable[type] = (), max_concurrent_turns: int | None = None
    ) -> AgentLoop:
        """Make the `AgentLoop` that runs turns (it validates the systems); `max_concurrent_turns`
        bounds the turns in flight per event loop (`AgentLoop`).

        A system that writes the `TurnOutcome` before the tool loop runs is refused: the
        model would still be asked and its tools run, for an answer nobody keeps.
        """
        loop = AgentLoop(
            self._systems,
            turn_timeout=turn_timeout if turn_timeout is not None else self.turn_timeout,
            inputs=inputs,
            clock=self.clock,
            metrics=self.metrics,
            max_concurrent_turns=max_concurrent_turns,
        )
        tool_loop = next((s for s in self._systems if isinstance(s, ToolLoopSystem)), None)
        for early in self._systems:
            if tool_loop is not None and TurnOutcome in early.writes and early.order < tool_loop.order:
                raise PipelineError(
                    f"{early.name} (order {early.order}) writes TurnOutcome before {tool_loop.name} (order "
                    f"{tool_loop.order}), which would still ask the model and run its tools; to answer by itself, "
                    f"write an LlmResponse instead ({tool_loop.name} then does not run), or give {early.name} an "
                    f"order after {tool_loop.order} to replace the model's answer"
                )
        return loop

    def close(self) -> None:
        """Give back the budget leases the pipeline's guards hold, then close the stores it opened."""
        try:
            release_now(budget_guards(self._systems))
        finally:
            if self.stores is not None and self.owns_stores:
                self.stores.close()

    def __enter__(self) -> StandardPipeline:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _index(self, system_type: type[System]) -> int:
        for index, system in enumerate(self._systems):
            if isinstance(system, system_type):
                return index
        raise self._missing(system_type)

    def _missing(self, system_type: type[System]) -> PipelineError:
        names = ", ".join(type(s).__name__ for s in self.systems)
        return PipelineError(f"no {system_type.__name__} in the pipeline (it has: {names})")


def standard_pipeline(
    llm: LLM,
    channel: Channel,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    bot: str = "bot",
    tools: Iterable[Tool | Callable[..., Any]] = (),
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    options: StandardOptions | None = None,
    embedder: Embedder | None = None,
    stores: Stores | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    approval: ApprovalPolicy | None = None,
) -> StandardPipeline:
    """The standard pipeline (docs/pipeline.md) for one bot.

    It keeps history, memory, indexed answers and tool calls awaiting approval in `stores`
    (from `open_stores`, still the caller's to close), or in the stores it opens at `data_dir`
    (a stores URL or a directory) for `bot` with `embedder` (default: as `open_stores`
    chooses, WordLlama's for new stores), closed with the pipeline. `tools` are `Tool`s or typed functions;
    `approval(ctx, call)` decides which calls wait for the user's approval (default: the
    tools made with `requires_approval=True`). Note retrieval and trajectory capture are added with `insert`.
    """
    if stores is None:
        if data_dir is None:
            raise ValueError("pass data_dir (a stores URL or the bot's directory) or stores (already open)")
        stores = open_stores(data_dir, bot=bot, embedder=embedder)
        try:
            return _standard(llm, channel, stores, True, tools, system_prompt, options, clock, metrics, approval)
        except BaseException:
            stores.close()
            raise
    if data_dir is not None or embedder is not None or bot != "bot":
        raise ValueError("pass data_dir or stores, not both: open stores already know their place, bot and embedder")
    return _standard(llm, channel, stores, False, tools, system_prompt, options, clock, metrics, approval)


class _WindowBudget:
    """`ContextBudget.for_window` of the window `llm` lists, read at first use and kept, so that a start-up
    check made after the build (it reads the window from the server) counts; one for context and compaction."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm
        self._budget: ContextBudget | None = None

    def __call__(self) -> ContextBudget:
        if self._budget is None:
            listed = getattr(self._llm, "context_window", None)
            self._budget = ContextBudget.for_window(listed if isinstance(listed, int) else None)
        return self._budget


def _standard(
    llm: LLM,
    channel: Channel,
    stores: Stores,
    owns_stores: bool,
    tools: Iterable[Tool | Callable[..., Any]],
    system_prompt: str,
    options: StandardOptions | None,
    clock: Clock | None,
    metrics: Metrics | None,
    approval: ApprovalPolicy | None,
) -> StandardPipeline:
    opts = options or StandardOptions()
    counter = opts.token_counter or EstimatedTokens()
    budget = opts.context_budget or _WindowBudget(llm)
    tool_loop = ToolLoopSystem(
        llm, tools, opts.tool_loop_settings(approval), channel=channel, metrics=metrics, approvals=stores.approvals,
        usage=stores.usage, prices=opts.prices, tokens=counter,
    )
    specs = tool_loop.tools.specs
    systems: list[System] = [
        InputSanitizationSystem(max_chars=opts.max_input_chars),
        ContextBuildingSystem(
            system_prompt,
            sessions=stores.sessions,
            history_window=opts.history_window,
            memory=stores.memory,
            memory_limit=opts.memory_limit,
            rag=stores.rag,
            rag_k=opts.rag_k,
            rag_min_score=opts.rag_min_score,
            company_id=opts.company_id,
            summaries=stores.summaries if opts.compaction else None,
            budget=budget,
            counter=counter,
            tools=specs,
            model=opts.model,
        ),
        tool_loop,
        TurnOutcomeFinalizationSystem(),
        FeedbackGuaranteeSystem(),
        ResponseRoutingSystem(channel),
        MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory, company_id=opts.company_id),
        UsageRecordingSystem(stores.usage, prices=opts.prices, company_id=opts.company_id),
        RagIndexingSystem(stores.rag, company_id=opts.company_id),
    ]
    if opts.compaction:
        systems.append(CompactionSystem(
            opts.summariser or llm, sessions=stores.sessions, summaries=stores.summaries, system_prompt=system_prompt,
            history_window=opts.history_window, company_id=opts.company_id, budget=budget,
            counter=counter, tools=specs, model=opts.model, summary_model=opts.summary_model,
            usage=stores.usage, prices=opts.prices, budget_guard=lambda: tool_loop.budget,
        ))
    return StandardPipeline(systems, stores=stores, owns_stores=owns_stores, turn_timeout=opts.turn_timeout, clock=clock, metrics=metrics)


def budget_guards(systems: Iterable[System]) -> list[BudgetGuard]:
    """The budget guards of `systems`, once each: every tool loop's (and those its replaced settings had), and a compaction's own."""
    guards: dict[int, BudgetGuard] = {}
    for system in systems:
        held = [system.budget, *system.retired_budgets] if isinstance(system, ToolLoopSystem) else [getattr(system, "budget_guard", None)]
        guards.update((id(guard), guard) for guard in held if isinstance(guard, BudgetGuard))
    return list(guards.values())


async def release_budgets(systems: Iterable[System]) -> None:
    """Give back every budget lease the guards of `systems` (a pipeline's, or `AgentLoop.systems`) hold
    (`BudgetGuard.release`), so that other processes may spend it: when the process stops, before its stores close."""
    await release_all(budget_guards(systems))

