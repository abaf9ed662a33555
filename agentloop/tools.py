"""Tools: typed Python functions a model can call, with a JSON schema from the signature.

    @tool
    def weather(city: str, days: int = 1) -> str:
        '''The forecast for a city.

        Args:
            city: the city's name, in English.
        '''

Pydantic builds the schema and checks the arguments before the call (nested attrs classes and
dataclasses, enums, Literals, defaults; parameter descriptions from the docstring); a bad call
raises `ToolArgumentError` and never reaches the function. A plain `def` tool runs on one of the
process's tool threads (`TOOL_THREADS_VARIABLE`), so one that blocks never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, get_type_hints, overload

import attrs
import pydantic
from pydantic import TypeAdapter

from agentloop._docstrings import parse_docstring
from agentloop._schemas import FieldSpec, adapter, error_lines, json_schema, object_type
from agentloop.errors import ToolArgumentError, ToolDefinitionError
from agentloop.messages import ToolSpec

if TYPE_CHECKING:
    from agentloop.approvals import ApprovalDecision, ApprovalRequest
    from agentloop.components import CallUsage, ToolExecution
    from agentloop.context import Session

T = TypeVar("T")

TOOL_THREADS_VARIABLE = "AGENTLOOP_TOOL_THREADS"
"""The environment variable bounding how many plain `def` tools run at once in a process."""
DEFAULT_TOOL_THREADS = 32

_CURRENT_EXECUTION: ContextVar[str | None] = ContextVar("agentloop_current_execution", default=None)
_ENCLOSING_TURN: ContextVar[EnclosingTurn | None] = ContextVar("agentloop_enclosing_turn", default=None)


class EnclosingTurn(Protocol):
    """The turn whose tool is running now, as a turn run inside that tool (a bot asked as a
    tool) reaches it: to be captured in its trajectory, spend from its budgets and ask its user."""

    @property
    def session(self) -> Session:
        """The enclosing turn's session."""
        ...

    @property
    def turn_id(self) -> str:
        """The enclosing turn's id."""
        ...

    def capture(self, execution: ToolExecution) -> None:
        """Capture an inner turn's tool execution in this turn's trajectory (and the turns enclosing it)."""
        ...

    async def spend(self, calls: tuple[CallUsage, ...]) -> None:
        """Count an inner turn's model calls as this turn's: its usage and its budgets."""
        ...

    def await_approval(self, request: ApprovalRequest) -> bool:
        """End this turn awaiting the user's decision on `request`, a call the inner turn holds back; False
        (nothing awaited) when another call of this turn already awaits one, as a turn awaits one at a time."""
        ...

    @property
    def decision(self) -> ApprovalDecision | None:
        """The user's decision this run of the tool resumes (its tool asked for one earlier), or None."""
        ...


def current_execution_id() -> str | None:
    """The id of the tool execution running now (in this task or thread), if any: a turn
    run from inside a tool records its own executions as that execution's children."""
    return _CURRENT_EXECUTION.get()


def enclosing_turn() -> EnclosingTurn | None:
    """The turn whose tool is running now (in this task or thread), if the tool loop running it offers one."""
    return _ENCLOSING_TURN.get()


@contextmanager
def running_execution(execution_id: str, turn: EnclosingTurn | None = None) -> Iterator[None]:
    """Mark `execution_id` as the execution running inside this block (see `current_execution_id`),
    run for `turn` when given (see `enclosing_turn`)."""
    token = _CURRENT_EXECUTION.set(execution_id)
    enclosing = _ENCLOSING_TURN.set(turn)
    try:
        yield
    finally:
        _ENCLOSING_TURN.reset(enclosing)
        _CURRENT_EXECUTION.reset(token)


@attrs.frozen
class Tool:
    """A callable the model may use: its `spec` (name, description, schema) and function.

    `arguments` validates what the model sent (None for a tool whose subclass validates itself).
    `requires_approval`: the user approves each call before it runs (the tool loop's default).
    `nested_approval`: the tool runs a turn that may itself wait for the user's approval (a bot
    asked as a tool): the user's decision goes back to the tool, approved or denied (`EnclosingTurn.decision`).
    """

    spec: ToolSpec
    function: Callable[..., Any]
    arguments: TypeAdapter[Any] | None = attrs.field(default=None, repr=False, eq=False)
    requires_approval: bool = False
    nested_approval: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def runs_on_thread(self) -> bool:
        """A plain `def` tool runs on a tool thread; an `async def` one on the event loop."""
        return not inspect.iscoroutinefunction(self.function)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments converted to the signature's types; `ToolArgumentError` if they do not fit."""
        if self.arguments is None:
            return dict(arguments)
        try:
            checked: dict[str, Any] = self.arguments.validate_python(dict(arguments))
        except pydantic.ValidationError as exc:
            raise ToolArgumentError(f"tool {self.name!r}: {'; '.join(error_lines(exc, 'argument'))}") from None
        return checked

    async def invoke(self, arguments: Mapping[str, Any]) -> Any:
        """Validate `arguments` and call the function: awaited if it is async, else on a tool thread
        (`tool_threads()`), with this task's context variables. Cancelled, the wait ends at once;
        a thread's call runs on to its end."""
        checked = self.validate(arguments)
        if not self.runs_on_thread:
            return await self.function(**checked)
        call = functools.partial(contextvars.copy_context().run, self.function, **checked)
        result = await asyncio.wrap_future(tool_threads().submit(call))
        if inspect.isawaitable(result):
            return await result
        return result


class ToolThreads:
    """A bounded pool of daemon threads for plain `def` tools: at most `size` calls run at once and
    the rest wait their turn in order. Daemon, so a call that never returns cannot keep the process
    from exiting."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a tool thread pool needs at least one thread, got {size}")
        self.size = size
        self._work: SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, call: Callable[[], T]) -> Future[T]:
        """Run `call` on a pool thread; its future holds what it returned or raised."""
        future: Future[T] = Future()
        self._work.put((future, call))
        if self._idle.acquire(blocking=False):  # a thread waits for work: it takes this call
            return future
        with self._lock:
            if self._threads < self.size:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"agentloop-tool-{self._threads}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            future, call = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as error:  # the caller's to judge: it gets whatever the tool raised
                    future.set_exception(error)
                else:
                    future.set_result(result)
            self._idle.release()


class _ProcessPool:
    """The process's `ToolThreads`, made on first use, and anew in a forked child (whose threads did not survive)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: ToolThreads | None = None

    def forget(self) -> None:
        self.lock = threading.Lock()
        self.pool = None


_POOL = _ProcessPool()
os.register_at_fork(after_in_child=_POOL.forget)


def tool_threads() -> ToolThreads:
    """The pool plain `def` tools run on: `AGENTLOOP_TOOL_THREADS` threads (default 32), read on first use."""
    with _POOL.lock:
        if _POOL.pool is None:
            text = os.environ.get(TOOL_THREADS_VARIABLE, str(DEFAULT_TOOL_THREADS))
            try:
                size = int(text)
            except ValueError:
                size = 0
            if size < 1:
                raise ValueError(f"{TOOL_THREADS_VARIABLE}={text!r}: give a whole number of threads, at least 1")
            _POOL.pool = ToolThreads(size)
        return _POOL.pool


def _make_tool(function: Callable[..., Any], name: str | None, description: str | None, requires_approval: bool) -> Tool:
    tool_name = name or function.__name__
    try:
        hints = get_type_hints(function, include_extras=True)
    except NameError as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve a type annotation ({exc})") from exc
    doc = parse_docstring(inspect.getdoc(function))
    fields: list[FieldSpec] = []
    for param in inspect.signature(function).parameters.values():
        where = f"tool {tool_name!r} parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDefinitionError(f"{where}: a tool takes named parameters only")
        if param.name not in hints:
            raise ToolDefinitionError(f"{where} needs a type annotation")
        annotation = hints[param.name]
        noted = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, str)]
        required = param.default is inspect.Parameter.empty
        fields.append(FieldSpec(param.name, annotation, required, attrs.NOTHING if required else param.default,
                                noted[0] if noted else doc.parameters.get(param.name)))
        try:
            json_schema(adapter(annotation))
        except NameError as exc:  # an attrs class or dataclass in the annotation names a type that does not exist
            raise ToolDefinitionError(f"{where}: cannot resolve a type annotation ({exc})") from exc
        except pydantic.PydanticUserError as exc:  # a schema-generation error names the type; ours adds the tool
            raise ToolDefinitionError(
                f"{where}: type {annotation!r} has no JSON schema ({exc.message.splitlines()[0]}); use str, int, "
                f"float, bool, an Enum, a Literal, an attrs class or dataclass, list[...], dict[str, ...] or an "
                f"Optional of these"
            ) from None
    arguments = adapter(object_type(tool_name, fields))
    text = description if description is not None else doc.description
    return Tool(ToolSpec(tool_name, text.strip(), json_schema(arguments)), function, arguments, requires_approval)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, requires_approval: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a `Tool`; the docstring is its description.

    Use `@tool` or `@tool(name=..., description=..., requires_approval=True)`. A parameter's description
    comes from the docstring's `Args:` (or numpy `Parameters`, or Sphinx `:param x:`) or
    `Annotated[str, "what it is"]`. With `requires_approval`, the user approves each call before it runs.
    """
    if function is not None:
        return _make_tool(function, name, description, requires_approval)
    return lambda f: _make_tool(f, name, description, requires_approval)


@attrs.frozen
class VoiceReply:
    """Return this from a tool to have `text` spoken to the user as a voice message."""

    text: str


class ToolRegistry:
    """The tools of a bot by name; refuses two tools with one name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        """Register a `Tool`, or a plain typed function (turned into one)."""
        found = item if isinstance(item, Tool) else tool(item)
        if found.name in self._tools:
            raise ToolDefinitionError(f"two tools are named {found.name!r}; pass name=... to one of them")
        self._tools[found.name] = found
        return found

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

