"""The System base class: one step of a pipeline, with its declared data access."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from agentloop.context import AgentContext


class System:
    """Subclass this to add a step to a bot.

    `order` places the system in the pipeline (lower runs first, ties keep insertion
    order). `reads`, `optional_reads` (read when present) and `writes` declare the
    component types it uses: the loop checks them when the pipeline is built, and
    while the system runs any other access raises `UndeclaredAccessError`. `always_run`
    systems run even after the turn deadline has passed. `process` may be `def` or
    `async def`.
    """

    order: ClassVar[int]
    name: str
    reads: ClassVar[tuple[type, ...]] = ()
    optional_reads: ClassVar[tuple[type, ...]] = ()
    writes: ClassVar[tuple[type, ...]] = ()
    always_run: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def should_process(self, ctx: AgentContext) -> bool:
        """Whether to run `process` for this turn; the default is always."""
        return True

    def process(self, ctx: AgentContext) -> None | Awaitable[None]:
        """Do this system's work on the turn."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(ctx)")

    def __repr__(self) -> str:
        order = getattr(self, "order", "?")
        return f"<{type(self).__name__} name={self.name!r} order={order}>"


System.name = "System"
