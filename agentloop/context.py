"""The turn context: the inputs of a turn and its typed component store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs
from cattrs.gen import make_dict_unstructure_fn, override

from agentloop._names import new_id
from agentloop.approvals import ApprovalDecision
from agentloop.errors import MissingComponentError, UndeclaredAccessError
from agentloop.messages import ChatMessage
from agentloop.mid_turn import Interruption
from agentloop.outcome import Attachment, FailureEvent, TurnOutcome, converter, copy_str_dict
from agentloop.ports.clock import Clock, SystemClock

if TYPE_CHECKING:
    from agentloop.system import System

T = TypeVar("T")


@attrs.frozen
class Session:
    """Who a turn belongs to. `id` serialises turns; the other ids scope data.

    `parent_id` links a child session to the session it was derived from (a bot asked as a
    tool by another runs in a child session of the asking bot's; see `agentloop.agents`).
    """

    id: str
    user_id: str | None = None
    project_id: str | None = None
    team_id: str | None = None
    org_id: str | None = None
    channel: str | None = None
    parent_id: str | None = None


# A session's JSON (the inbox stores it and compares a resubmit with it) names `parent_id` only when
# it is set, so a session stored before sessions had one reads as the same session.
converter.register_unstructure_hook(
    Session, make_dict_unstructure_fn(Session, converter, parent_id=override(omit_if_default=True))
)


@attrs.frozen
class IncomingMessage:
    """What arrived. `auto_mode` turns (tasks, schedules) send nothing to a user; a `decision`
    answers a tool call that awaits the user's approval (build one with `approval`)."""

    text: str
    attachments: tuple[Attachment, ...] = ()
    auto_mode: bool = False
    metadata: dict[str, str] = attrs.field(factory=dict, converter=copy_str_dict, hash=False)
    decision: ApprovalDecision | None = None

    @classmethod
    def approval(cls, approval_id: str, *, approved: bool, note: str | None = None) -> IncomingMessage:
        """The user's decision on the pending tool call `approval_id`, as a message; its text
        (what history keeps of it) reads like the chat command that sends it."""
        text = "/approve" if approved else "/deny"
        return cls(f"{text} {note}" if note else text, decision=ApprovalDecision(approval_id, approved, note))


ALWAYS_READABLE: tuple[type, ...] = (Session, IncomingMessage)
"""The turn's own inputs: on every turn context, and readable by every system."""


Access = tuple[frozenset[type], frozenset[type]]
"""What a running system may touch: (types it may read, types it may write)."""


def declared_access(system: System) -> Access:
    """What `system` may touch while it runs: (types it may read, types it may write).

    It reads what it declares in `reads`, `optional_reads` and `writes`, plus the
    session and the message; it writes only what it declares in `writes`.
    """
    writable = frozenset(system.writes)
    return frozenset((*ALWAYS_READABLE, *system.reads, *system.optional_reads)) | writable, writable


class AgentContext:
    """One turn: its session, message, history, failures and typed components.

    Components are keyed by their exact type: `ctx.set(PromptContext(...))`, then
    `ctx.get(PromptContext)`. There is no string-keyed attribute bus. While a system
    runs, touching a type outside its declaration raises `UndeclaredAccessError`;
    outside a running system (the caller, a test, the loop itself) every type is open.
    """

    __slots__ = (
        "session",
        "incoming",
        "turn_id",
        "deadline",
        "interruption",
        "clock",
        "current_system",
        "_access",
        "_history",
        "_failures",
        "_components",
    )

    def __init__(
        self,
        session: Session,
        incoming: IncomingMessage,
        *,
        history: Sequence[ChatMessage] = (),
        deadline: float | None = None,
        clock: Clock | None = None,
        turn_id: str | None = None,
        components: Iterable[object] = (),
        interruption: Interruption | None = None,
    ) -> None:
        self.session = session
        self.incoming = incoming
        self.turn_id = turn_id or new_id()
        self.deadline = deadline
        """Monotonic time (of `clock`) after which the turn is out of time, or None."""
        self.clock: Clock = clock or SystemClock()
        self.interruption = interruption
        """How the turn learns that a newer message of its session waits (the interrupt policy), or None."""
        self.current_system: str | None = None
        """The name of the system running now; errors and failures name it."""
        # The declared access of the running system, None for unchecked. The loop swaps
        # in each system's precomputed pair, so an access costs one set lookup.
        self._access: Access | None = None
        self._history = tuple(history)
        self._failures: list[FailureEvent] = []
        self._components: dict[type, object] = {Session: session, IncomingMessage: incoming}
        for component in components:
            self.set(component)

    @property
    def history(self) -> tuple[ChatMessage, ...]:
        """The session's earlier messages, oldest first; read-only."""
        return self._history

    @property
    def failures(self) -> tuple[FailureEvent, ...]:
        return tuple(self._failures)

    def add_failure(self, event: FailureEvent) -> None:
        self._failures.append(event)

    @property
    def auto_mode(self) -> bool:
        return self.incoming.auto_mode

    def time_left(self) -> float | None:
        """Seconds until the deadline (negative once passed), or None without one."""
        if self.deadline is None:
            return None
        return self.deadline - self.clock.monotonic()

    def deadline_passed(self) -> bool:
        return self.deadline is not None and self.clock.monotonic() >= self.deadline

    async def interrupted(self) -> bool:
        """Whether a newer message of the session asks this turn to stop at its safe point
        (before its next model call or tool step); always False without an `interruption`."""
        return self.interruption is not None and await self.interruption.newer()

    def _enter(self, name: str | None, access: Access | None) -> None:
        """Make `name` the running system, its accesses held to `access` (None: unchecked).

        Private, for the loop and `agentloop.testing.run_system`: a running system has no
        public way to lift or widen its own check.
        """
        self.current_system, self._access = name, access

    @contextlib.contextmanager
    def _running(self, system: System) -> Iterator[None]:
        """Hold accesses to `system`'s declaration inside the block, then restore the check before it.

        Private, for the loop and `agentloop.testing.run_system`: a running system has no
        public way to lift or widen its own check.
        """
        previous = self.current_system, self._access
        self.current_system, self._access = system.name, declared_access(system)
        try:
            yield
        finally:
            self.current_system, self._access = previous

    def _undeclared(self, component_type: type, *, write: bool) -> UndeclaredAccessError:
        return UndeclaredAccessError(self.current_system or "?", component_type, write=write)

    def get(self, component_type: type[T]) -> T | None:
        """The component of exactly this type, or None."""
        access = self._access
        if access is not None and component_type not in access[0]:
            raise self._undeclared(component_type, write=False)
        return self._components.get(component_type)  # type: ignore[return-value]

    def require(self, component_type: type[T]) -> T:
        """The component of this type; `MissingComponentError` names the system if absent."""
        access = self._access
        if access is not None and component_type not in access[0]:
            raise self._undeclared(component_type, write=False)
        try:
            return self._components[component_type]  # type: ignore[return-value]
        except KeyError:
            raise MissingComponentError(component_type, self.current_system) from None

    def set(self, component: object) -> None:
        """Store `component` under its own type, replacing any earlier one."""
        component_type = type(component)
        if component_type.__module__ == "builtins":
            raise TypeError(
                f"components are keyed by type, so a bare {component_type.__name__} would "
                f"collide with every other one; wrap it in an attrs class"
            )
        access = self._access
        if access is not None and component_type not in access[1]:
            raise self._undeclared(component_type, write=True)
        self._components[component_type] = component

    def has(self, component_type: type) -> bool:
        access = self._access
        if access is not None and component_type not in access[0]:
            raise self._undeclared(component_type, write=False)
        return component_type in self._components

    def remove(self, component_type: type) -> None:
        """Drop the component of this type, if any."""
        access = self._access
        if access is not None and component_type not in access[1]:
            raise self._undeclared(component_type, write=True)
        self._components.pop(component_type, None)

    def components(self) -> tuple[object, ...]:
        """Every component on the turn (that the running system may read), in the order they were first set."""
        access = self._access
        if access is None:
            return tuple(self._components.values())
        return tuple(c for t, c in self._components.items() if t in access[0])

    @property
    def turn_outcome(self) -> TurnOutcome | None:
        return self.get(TurnOutcome)

    def __repr__(self) -> str:
        names = ", ".join(t.__name__ for t in self._components)
        return f"<AgentContext turn={self.turn_id} session={self.session.id!r} components=[{names}]>"


