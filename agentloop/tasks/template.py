"""The loaded form of a task template: one frozen class per operator.

Each keeps the settings it was written with (`overrides`) and the merged result
(`context`), plus where it came from, so errors found later still name file and line.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from agentloop.tasks.settings import (
    ContextManagement,
    ContextOverrides,
    Operator,
    Position,
    Subtype,
    resolve,
)


@attrs.frozen
class SourceLocation:
    file: str
    line: int | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file} line {self.line}"


@attrs.frozen(kw_only=True)
class _Template:
    name: str | None
    description: str
    inputs: tuple[str, ...] = ()
    overrides: ContextOverrides = ContextOverrides()
    context: ContextManagement
    source: SourceLocation

    operator: ClassVar[Operator]

    @property
    def label(self) -> str:
        """The name, or where the task is written when it has none."""
        return self.name if self.name is not None else f"{self.operator.value} task at {self.source}"


@attrs.frozen(kw_only=True)
class AtomicTemplate(_Template):
    """One auto-mode turn of an AgentLoop."""

    operator: ClassVar[Operator] = Operator.ATOMIC
    subtype: Subtype = Subtype.STANDARD


@attrs.frozen(kw_only=True)
class SequentialTemplate(_Template):
    """Steps run in order; each may see what the earlier ones produced."""

    operator: ClassVar[Operator] = Operator.SEQUENTIAL
    steps: tuple[TaskTemplate, ...]


@attrs.frozen(kw_only=True)
class ReduceTemplate(_Template):
    """The inner task per item of input `over`, each folded in by the reduction task."""

    operator: ClassVar[Operator] = Operator.REDUCE
    inner: TaskTemplate
    reduction: TaskTemplate
    over: str = "items"


@attrs.frozen(kw_only=True)
class ScriptTemplate(_Template):
    """An external command: an argv list, no shell, with a timeout in seconds."""

    operator: ClassVar[Operator] = Operator.SCRIPT
    command: tuple[str, ...]
    timeout: float | None = None


TaskTemplate = AtomicTemplate | SequentialTemplate | ReduceTemplate | ScriptTemplate


def as_subtask(template: TaskTemplate) -> TaskTemplate:
    """The template as a CONTINUATION spawns it: atomic tasks take the subtask defaults
    under their own explicit settings (merged as at load); other operators keep theirs."""
    if not isinstance(template, AtomicTemplate) or template.subtype is Subtype.SUBTASK:
        return template
    context = resolve(Operator.ATOMIC, Subtype.SUBTASK, Position.TOP, template.overrides)
    return attrs.evolve(template, subtype=Subtype.SUBTASK, context=context)


def contains_script(template: TaskTemplate) -> ScriptTemplate | None:
    """The first script task in the template's tree, if any."""
    if isinstance(template, ScriptTemplate):
        return template
    children: tuple[TaskTemplate, ...] = ()
    if isinstance(template, SequentialTemplate):
        children = template.steps
    elif isinstance(template, ReduceTemplate):
        children = (template.inner, template.reduction)
    for child in children:
        found = contains_script(child)
        if found is not None:
            return found
    return None
