"""Context-management settings: the per-operator defaults, partial overrides and checks.

The defaults are the per-operator table in docs/tasks.md, one row per operator and position.
Settings are merged once, when a template is loaded; nothing is resolved at run time.
"""

from __future__ import annotations

import enum

import attrs


class Operator(enum.Enum):
    ATOMIC = "atomic"
    SEQUENTIAL = "sequential"
    REDUCE = "reduce"
    SCRIPT = "script"


class Subtype(enum.Enum):
    """Atomic tasks only: `subtask` is what a CONTINUATION spawns."""

    STANDARD = "standard"
    SUBTASK = "subtask"


class Position(enum.Enum):
    """Where a task sits; a reduce's inner and reduction tasks have their own defaults."""

    TOP = "top"
    STEP = "step"
    REDUCE_INNER = "reduce.inner_task"
    REDUCE_REDUCTION = "reduce.reduction_task"


class InheritContext(enum.Enum):
    """What a task takes of the context its parent (or caller) had."""

    FULL = "full"
    NONE = "none"
    SUBSET = "subset"
    """Only the entries named by the task's declared `<inputs>`."""


class FreshContext(enum.Enum):
    """Whether the framework may retrieve notes and memory for the task's turns."""

    ENABLED = "enabled"
    DISABLED = "disabled"


class AccumulationFormat(enum.Enum):
    """What a sequence keeps of each finished step: its notes only, or its full output too."""

    NOTES_ONLY = "notes_only"
    """Only the step's notes, intact; its content is dropped."""
    FULL_OUTPUT = "full_output"
    """The step's content and its notes."""


@attrs.frozen
class ContextManagement:
    """The merged settings of one task. `accumulate_data` and `accumulation_format` are
    None where they do not apply (every operator but sequential)."""

    inherit_context: InheritContext
    accumulate_data: bool | None
    accumulation_format: AccumulationFormat | None
    fresh_context: FreshContext

    @property
    def fresh(self) -> bool:
        return self.fresh_context is FreshContext.ENABLED

    @property
    def accumulates(self) -> bool:
        return bool(self.accumulate_data)


@attrs.frozen
class ContextOverrides:
    """The settings a template wrote explicitly; None means "use the default"."""

    inherit_context: InheritContext | None = None
    accumulate_data: bool | None = None
    accumulation_format: AccumulationFormat | None = None
    fresh_context: FreshContext | None = None


def _row(inherit: str, fresh: str, accumulate: bool | None = None, fmt: str | None = None) -> ContextManagement:
    return ContextManagement(
        InheritContext(inherit), accumulate, None if fmt is None else AccumulationFormat(fmt), FreshContext(fresh)
    )


OPERATOR_DEFAULTS: dict[str, ContextManagement] = {
    "atomic (standard)": _row("full", "disabled"),
    "atomic (subtask)": _row("none", "enabled"),
    "sequential": _row("full", "disabled", True, "notes_only"),
    "reduce": _row("none", "enabled"),
    "reduce.inner_task": _row("full", "disabled"),
    "reduce.reduction_task": _row("full", "disabled"),
    "script": _row("full", "disabled"),
}
"""The per-operator defaults (the table in docs/tasks.md), keyed by its first column."""


def defaults_key(operator: Operator, subtype: Subtype, position: Position) -> str:
    """The row of `OPERATOR_DEFAULTS` for a task of this operator, subtype and position."""
    if operator is Operator.ATOMIC:
        if subtype is Subtype.SUBTASK:
            return "atomic (subtask)"
        if position in (Position.REDUCE_INNER, Position.REDUCE_REDUCTION):
            return str(position.value)
        return "atomic (standard)"
    return str(operator.value)


def merge(defaults: ContextManagement, overrides: ContextOverrides) -> ContextManagement:
    """The defaults with every explicitly written setting put over them.

    An explicit inherit_context of full or subset, with fresh_context not written, turns
    the default fresh_context off: the explicit setting wins over the default instead of
    clashing with it (an explicit fresh_context=enabled beside it is still an error).
    """
    fresh = overrides.fresh_context or defaults.fresh_context
    if overrides.inherit_context not in (None, InheritContext.NONE) and overrides.fresh_context is None:
        fresh = FreshContext.DISABLED
    return ContextManagement(
        overrides.inherit_context or defaults.inherit_context,
        defaults.accumulate_data if overrides.accumulate_data is None else overrides.accumulate_data,
        overrides.accumulation_format or defaults.accumulation_format,
        fresh,
    )


def resolve(operator: Operator, subtype: Subtype, position: Position, overrides: ContextOverrides) -> ContextManagement:
    """Defaults for the operator merged with the template's overrides."""
    return merge(OPERATOR_DEFAULTS[defaults_key(operator, subtype, position)], overrides)


@attrs.frozen
class SettingsProblem:
    """One finding of `check`: the setting it is about and a plain sentence."""

    setting: str
    message: str

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class SettingsCheck:
    """What `check` found: errors refuse the template, warnings only report."""

    errors: tuple[SettingsProblem, ...] = ()
    warnings: tuple[SettingsProblem, ...] = ()


def check(operator: Operator, overrides: ContextOverrides, settings: ContextManagement) -> SettingsCheck:
    """Validate merged settings as plain sentences: errors refuse the template, warnings only advise."""
    errors: list[SettingsProblem] = []
    warnings: list[SettingsProblem] = []
    if settings.fresh and settings.inherit_context is not InheritContext.NONE:
        errors.append(
            SettingsProblem(
                "fresh_context",
                f"fresh_context=enabled needs inherit_context=none (it is {settings.inherit_context.value}); "
                f"a task either inherits its parent's context or gathers a fresh one",
            )
        )
    if operator is not Operator.SEQUENTIAL:
        for field in ("accumulate_data", "accumulation_format"):
            if getattr(overrides, field) is not None:
                errors.append(SettingsProblem(field, f"{field} applies only to sequential tasks, not to {operator.value} tasks"))
    elif settings.accumulation_format is AccumulationFormat.FULL_OUTPUT and not settings.accumulates:
        warnings.append(
            SettingsProblem("accumulation_format", "accumulation_format=full_output has no effect with accumulate_data=false")
        )
    if settings.inherit_context is InheritContext.NONE and not settings.accumulates and not settings.fresh:
        warnings.append(
            SettingsProblem(
                "context_management",
                "inherit_context=none with no accumulation and fresh_context=disabled gives the task no context at all",
            )
        )
    return SettingsCheck(tuple(errors), tuple(warnings))
