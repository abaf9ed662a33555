"""Tests for agentloop.tasks.settings: the per-operator defaults table, merging and checks."""

from __future__ import annotations

import pytest

from agentloop.tasks import (
    OPERATOR_DEFAULTS,
    AccumulationFormat,
    ContextOverrides,
    FreshContext,
    InheritContext,
    Operator,
    Position,
    Subtype,
    check,
    defaults_key,
    merge,
    resolve,
)

# The defaults table of docs/tasks.md, row by row: inherit, accumulate, format, fresh.
TABLE = {
    "atomic (standard)": ("full", None, None, "disabled"),
    "atomic (subtask)": ("none", None, None, "enabled"),
    "sequential": ("full", True, "notes_only", "disabled"),
    "reduce": ("none", None, None, "enabled"),
    "reduce.inner_task": ("full", None, None, "disabled"),
    "reduce.reduction_task": ("full", None, None, "disabled"),
    "script": ("full", None, None, "disabled"),
}


@pytest.mark.parametrize("row", sorted(TABLE))
def test_defaults_follow_the_seed_table(row: str) -> None:
    settings = OPERATOR_DEFAULTS[row]
    fmt = None if settings.accumulation_format is None else settings.accumulation_format.value
    assert (settings.inherit_context.value, settings.accumulate_data, fmt, settings.fresh_context.value) == TABLE[row]


@pytest.mark.parametrize(
    ("operator", "subtype", "position", "row"),
    [
        (Operator.ATOMIC, Subtype.STANDARD, Position.TOP, "atomic (standard)"),
        (Operator.ATOMIC, Subtype.SUBTASK, Position.STEP, "atomic (subtask)"),
        (Operator.ATOMIC, Subtype.STANDARD, Position.REDUCE_INNER, "reduce.inner_task"),
        (Operator.ATOMIC, Subtype.STANDARD, Position.REDUCE_REDUCTION, "reduce.reduction_task"),
        (Operator.SEQUENTIAL, Subtype.STANDARD, Position.REDUCE_INNER, "sequential"),
        (Operator.SCRIPT, Subtype.STANDARD, Position.STEP, "script"),
    ],
)
def test_the_row_depends_on_operator_subtype_and_position(
    operator: Operator, subtype: Subtype, position: Position, row: str
) -> None:
    assert defaults_key(operator, subtype, position) == row


def test_a_partial_override_keeps_every_other_default() -> None:
    merged = merge(OPERATOR_DEFAULTS["sequential"], ContextOverrides(accumulate_data=False))
    assert merged.accumulate_data is False
    assert merged.inherit_context is InheritContext.FULL
    assert merged.accumulation_format is AccumulationFormat.NOTES_ONLY
    assert merged.fresh_context is FreshContext.DISABLED


@pytest.mark.parametrize("inherit", [InheritContext.FULL, InheritContext.SUBSET])
def test_fresh_context_with_inherited_context_is_an_error(inherit: InheritContext) -> None:
    overrides = ContextOverrides(inherit_context=inherit, fresh_context=FreshContext.ENABLED)
    found = check(Operator.ATOMIC, overrides, resolve(Operator.ATOMIC, Subtype.STANDARD, Position.TOP, overrides))
    assert [(e.setting, e.message.split(" (")[0]) for e in found.errors] == [
        ("fresh_context", "fresh_context=enabled needs inherit_context=none")
    ]


@pytest.mark.parametrize("inherit", [InheritContext.FULL, InheritContext.SUBSET])
@pytest.mark.parametrize(("operator", "subtype"), [(Operator.ATOMIC, Subtype.SUBTASK), (Operator.REDUCE, Subtype.STANDARD)])
def test_an_explicit_inherit_setting_turns_the_default_fresh_context_off(
    inherit: InheritContext, operator: Operator, subtype: Subtype
) -> None:
    """Explicit settings override the defaults, and the check sees the merge."""
    overrides = ContextOverrides(inherit_context=inherit)
    merged = resolve(operator, subtype, Position.TOP, overrides)
    assert (merged.inherit_context, merged.fresh_context) == (inherit, FreshContext.DISABLED)
    assert check(operator, overrides, merged).errors == ()


def test_an_explicit_none_keeps_the_default_fresh_context() -> None:
    merged = resolve(Operator.ATOMIC, Subtype.SUBTASK, Position.TOP, ContextOverrides(inherit_context=InheritContext.NONE))
    assert merged.fresh_context is FreshContext.ENABLED


def test_no_context_at_all_is_a_warning_not_an_error() -> None:
    overrides = ContextOverrides(inherit_context=InheritContext.NONE, accumulate_data=False)
    found = check(Operator.SEQUENTIAL, overrides, resolve(Operator.SEQUENTIAL, Subtype.STANDARD, Position.TOP, overrides))
    assert found.errors == ()
    assert [w.setting for w in found.warnings] == ["context_management"]


def test_full_output_without_accumulation_is_a_warning() -> None:
    overrides = ContextOverrides(accumulate_data=False, accumulation_format=AccumulationFormat.FULL_OUTPUT)
    found = check(Operator.SEQUENTIAL, overrides, resolve(Operator.SEQUENTIAL, Subtype.STANDARD, Position.TOP, overrides))
    assert [w.setting for w in found.warnings] == ["accumulation_format"]


@pytest.mark.parametrize("operator", [Operator.ATOMIC, Operator.REDUCE, Operator.SCRIPT])
def test_accumulation_settings_only_apply_to_sequences(operator: Operator) -> None:
    overrides = ContextOverrides(accumulate_data=True, accumulation_format=AccumulationFormat.NOTES_ONLY)
    found = check(operator, overrides, resolve(operator, Subtype.STANDARD, Position.TOP, overrides))
    assert [e.setting for e in found.errors] == ["accumulate_data", "accumulation_format"]


def test_every_default_row_passes_its_own_check() -> None:
    for row, settings in OPERATOR_DEFAULTS.items():
        operator = Operator(row.split(" ")[0].split(".")[0])
        assert check(operator, ContextOverrides(), settings).errors == (), row
