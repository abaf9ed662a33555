"""Building bots: the composition root the `agentloop` command and `agentloop serve` share.

Every command that runs or inspects a bot opens it with `open_bot` (the standard pipeline
with note-taking) or builds the user's pipeline with `built_pipeline`, so the demo, chat,
notes, the worker and the HTTP server see the same bot. With the `agentloop.cli` package, this
is the only module of `agentloop` that imports `systems`; `agentloop.serve` builds its bots
here and never imports the CLI. Callers say which bot and which model with `BotSettings` and
`ModelSettings`, whatever they were read from (command-line options, a server's settings).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sqlite3
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, cast

import attrs

from agentloop.adapters import open_note_taking, open_stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.stores import DEFAULT_STORES_URL
from agentloop.adapters.urls import shown_url
from agentloop.budgets import Budgets
from agentloop.errors import AgentloopError, ApiKeyRefusedError, ApiPathError, EndpointUnreachableError, UnknownModelError
from agentloop.loop import AgentLoop
from agentloop.notes import NoteTaking
from agentloop.ports import LLM, Channel, CheckableLLM, Clock
from agentloop.system import System
from agentloop.tools import Tool
from systems import StandardPipeline, TrajectoryCaptureSystem, add_note_taking, standard_pipeline
from systems.standard import release_budgets as release_guards
from systems.budgets import BudgetGuard
from systems.compaction import CompactionSystem
from systems.tool_loop import ToolLoopSystem

DEFAULT_BASE_URL = "http://localhost:11434/v1"
API_KEY_VARIABLES = ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")
ANTHROPIC_KEY_VARIABLES = ("AGENTLOOP_API_KEY", "ANTHROPIC_API_KEY")
FACTORY_ARGUMENTS = ("llm", "channel", "stores")
"""What a pipeline factory may take, each by its parameter name."""


class BotError(AgentloopError):
    """A problem with a bot the user can fix (stores that do not open, a pipeline that does not
    build, a model server out of reach): one line, which the `agentloop` command prints as it
    prints its own errors (exit status 1)."""


@attrs.frozen
class BotSettings:
    """Which bot to open: where its stores are (a store URL or a data directory) and its name."""

    stores: str = DEFAULT_STORES_URL
    bot: str = "bot"


@attrs.frozen
class ModelSettings:
    """The model a bot talks to: its name, the API its endpoint speaks (openai or anthropic) and the
    endpoint (None: the provider's default); the key comes from the environment."""

    model: str
    provider: str = "openai"
    base_url: str | None = None
    fallbacks: tuple[str, ...] = ()
    """Models of the same endpoint to ask, in order, when `model` fails as an outage does (a `FallbackLLM`)."""

    def llm(self) -> LLM:
        """The model, checked to be reachable and served (`http_llm`), behind a `FallbackLLM` with its fallbacks."""
        primary = http_llm(self.base_url, self.model, provider=self.provider)
        if not self.fallbacks:
            return primary
        from agentloop.adapters.llm.fallback import FallbackLLM

        return FallbackLLM([primary, *(http_llm(self.base_url, name, provider=self.provider) for name in self.fallbacks)])


@attrs.define
class Bot:
    """An open bot: its editable pipeline (which owns the stores), the loop built from
    it, and its note-taking (capture, distillation, the knowledge base)."""

    pipeline: StandardPipeline
    loop: AgentLoop
    note_taking: NoteTaking


@contextmanager
def open_bot(
    stores: str | os.PathLike[str],
    llm: LLM,
    channel: Channel,
    *,
    bot: str = "bot",
    tools: Iterable[Tool | Callable[..., Any]] = (),
    clock: Clock | None = None,
    inputs: Iterable[type] = (),
    create: bool = True,
) -> Iterator[Bot]:
    """The standard bot with note-taking on the stores at `stores` (a URL or a data
    directory), built; on exit capture is drained and every store closed (indexes saved).
    With `create` false, a bot that has no stores there yet is refused."""
    with ExitStack() as stack:
        try:
            opened = stack.enter_context(open_stores(stores, bot=bot, create=create))
            pipeline = stack.enter_context(standard_pipeline(llm, channel, stores=opened, tools=tools, clock=clock))
            note_taking = stack.enter_context(open_note_taking(opened, llm, clock=clock))
        except StoreUrlError as error:
            raise BotError(str(error)) from error
        except (OSError, ValueError, sqlite3.Error) as error:
            raise BotError(f"cannot open the bot {bot!r} in {shown_url(os.fspath(stores))}: {error}") from error
        add_note_taking(pipeline, note_taking)
        yield Bot(pipeline, pipeline.build(inputs=inputs), note_taking)


def apply_budgets(loop: AgentLoop, budgets: Budgets) -> None:
    """Give each tool loop of `loop` the `budgets` (the `--budget` options); a compaction given no guard
    checks its summariser calls on the first tool loop's current one (its own only in a pipeline without
    a tool loop). A system made without a usage store cannot keep session or tenant limits, and says so as a BotError."""
    if not budgets.configured:
        return
    tool_loops = [system for system in loop.systems if isinstance(system, ToolLoopSystem)]
    for system in loop.systems:
        try:
            if isinstance(system, ToolLoopSystem):
                system.settings = attrs.evolve(system.settings, budgets=budgets)
            elif isinstance(system, CompactionSystem) and system.budget_guard is None:
                system.budget_guard = _current_guard(tool_loops[0]) if tool_loops else BudgetGuard(
                    budgets, system.usage, prices=system.prices, company_id=system.company_id, tokens=system.counter
                )
        except ValueError as error:
            raise BotError(f"{system.name}: {error}") from error


async def release_budgets(loop: AgentLoop) -> None:
    """Give back the budget leases `loop`'s guards hold (`systems.release_budgets`): when the process
    stops, before its stores close, so that other processes of the bot may spend them."""
    await release_guards(loop.systems)


def _current_guard(tool_loop: ToolLoopSystem) -> Callable[[], BudgetGuard | None]:
    """The guard `tool_loop` holds when called: its settings may be replaced after this."""
    return lambda: tool_loop.budget


def load_factory(target: str) -> Callable[..., Any]:
    """Import the callable `factory` of `module:factory`; modules in the current directory
    are found, as with `python -m`. A target that names nothing callable is a BotError."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise BotError(f"expected MODULE:FACTORY, got {target!r}")
    factory = getattr(_user_module(module_name), attribute, None)
    if not callable(factory):
        raise BotError(f"{module_name!r} has no callable {attribute!r}")
    return cast(Callable[..., Any], factory)


def _user_module(module_name: str) -> types.ModuleType:
    """Import the user's module; modules in the current directory are found, as with `python -m`."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise BotError(f"cannot import {module_name!r}: {error}") from error
    except Exception as error:  # the module fails as it runs: a tool it defines is refused, a syntax error
        raise BotError(f"cannot import {module_name!r}: {type(error).__name__}: {error}") from error


def factory_arguments(target: str, factory: Callable[..., Any], offered: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """The keyword arguments `factory` asks for by name, each made by its maker in `offered`
    (only those it names are made); a required parameter nothing offers is a BotError."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    arguments: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name in offered and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY:
            arguments[parameter.name] = offered[parameter.name]()
        elif parameter.default is inspect.Parameter.empty and parameter.kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD
        ):
            given = ", ".join(name for name in FACTORY_ARGUMENTS if name in offered) or "nothing"
            raise BotError(
                f"{target} takes {parameter.name!r}, which this command cannot give; "
                f"a factory may take {given} (by those names), or nothing"
            )
    return arguments


@contextmanager
def built_pipeline(
    target: str | Callable[..., Any], offered: Mapping[str, Callable[[], Any]] | None = None
) -> Iterator[AgentLoop]:
    """The AgentLoop that `module:factory` (or the factory itself) builds, called with what it names
    of `offered` (`llm`, `channel`, `stores`: parameter name to a function making the argument).

    The factory may return an AgentLoop, a sequence of systems, or a builder with a
    `build()` method (closed on exit if it has `close()`, as a `StandardPipeline` does).
    Any error the factory raises is one BotError line.
    """
    factory = load_factory(target) if isinstance(target, str) else target
    name = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
    with ExitStack() as stack:
        arguments = factory_arguments(name, factory, offered or {})
        try:
            built = factory(**arguments)
            if callable(getattr(built, "close", None)):
                stack.callback(built.close)
            if callable(getattr(built, "build", None)):
                built = built.build()
            if isinstance(built, Sequence) and all(isinstance(s, System) for s in built):
                built = AgentLoop(built)
        except Exception as error:
            raise BotError(f"{name} does not build: {error}") from error
        if not isinstance(built, AgentLoop):
            raise BotError(
                f"{name} returned {type(built).__name__}; expected an AgentLoop, a list of systems or a builder"
            )
        yield built


def check_models(loop: AgentLoop) -> None:
    """The start-up check of each model the pipeline's systems call that has one (`CheckableLLM`:
    the HTTP adapters, not the scripted model): its error says what to fix, before the first turn."""
    checked: set[int] = set()
    for system in loop.systems:
        llm = getattr(system, "llm", None)
        if isinstance(llm, CheckableLLM) and id(llm) not in checked:
            checked.add(id(llm))
            llm.check()


def pipeline_note_taking(loop: AgentLoop) -> NoteTaking | None:
    """The note-taking a pipeline captures its sessions' tool calls with, if it has one: ending
    a session must drain that recorder before its trajectory is distilled."""
    return next((s.note_taking for s in loop.systems if isinstance(s, TrajectoryCaptureSystem)), None)


def user_tools(module_name: str) -> list[Tool]:
    """The `Tool`s (functions decorated with `@tool`, or Tool objects) defined in a module."""
    tools = [value for value in vars(_user_module(module_name)).values() if isinstance(value, Tool)]
    if not tools:
        raise BotError(f"{module_name!r} defines no tools; decorate its functions with @agentloop.tool")
    return tools


def api_key_from(variables: Sequence[str]) -> str | None:
    """The model server's key: the first of the environment `variables` that is set and not empty, else None."""
    return next((os.environ[name] for name in variables if os.environ.get(name)), None)


def http_llm(base_url: str | None, model: str, *, provider: str = "openai") -> LLM:
    """The model `provider` (openai or anthropic) serves at `base_url` (the provider's default
    when None), checked to be reachable and to serve `model` (where the server lists its
    models), with the context window the listing gives (`context_window`, None where it gives
    none); the key comes from the environment."""
    check: Callable[..., int | None]
    make: Callable[..., LLM]
    try:
        if provider == "anthropic":
            from agentloop.adapters.llm import anthropic as anthropic_llm

            url, api_key = base_url or anthropic_llm.ANTHROPIC_API_URL, api_key_from(ANTHROPIC_KEY_VARIABLES)
            check, make = anthropic_llm.check_reachable, anthropic_llm.AnthropicLLM
        else:
            from agentloop.adapters.llm import openai as openai_llm

            url, api_key = base_url or os.environ.get("AGENTLOOP_BASE_URL", DEFAULT_BASE_URL), api_key_from(API_KEY_VARIABLES)
            check, make = openai_llm.check_reachable, openai_llm.OpenAICompatibleLLM
    except ImportError as error:
        raise BotError(f"talking to a model server needs httpx and tenacity: pip install 'agentloop-ecs[{provider}]' ({error})") from error
    try:
        window = check(url, model=model, api_key=api_key)
    except (EndpointUnreachableError, UnknownModelError, ApiKeyRefusedError, ApiPathError) as error:
        raise BotError(str(error)) from error
    return make(url, model, api_key=api_key, context_window=window)


def start_otel(service_name: str) -> Callable[[], None]:
    """`--otel`: OpenTelemetry set up from the OTEL_* variables; returns the shutdown that flushes it."""
    try:
        otel = importlib.import_module("agentloop.adapters.otel")
    except ImportError as error:
        raise BotError(f"--otel needs OpenTelemetry: pip install 'agentloop-ecs[otel]' ({error})") from error
    try:
        shutdown: Callable[[], None] = otel.setup_from_environment(service_name)
    except otel.TelemetryConfigError as error:
        raise BotError(str(error)) from error
    return shutdown
