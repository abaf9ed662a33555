"""Checked access: while a system runs, it touches only the component types it declares."""

from __future__ import annotations

import attrs
import pytest

from agentloop import (
    AgentContext,
    AgentLoop,
    FailureKind,
    FailureSource,
    IncomingMessage,
    PipelineError,
    Session,
    System,
    UndeclaredAccessError,
)
from agentloop.testing import make_context, make_system, run_pipeline, run_system_sync


@attrs.frozen
class Draft:
    text: str


@attrs.frozen
class Review:
    ok: bool


def _only_failure(ctx: AgentContext) -> str:
    (failure,) = ctx.failures
    assert failure.source is FailureSource.SYSTEM and failure.kind is FailureKind.VALIDATION
    return failure.message


def test_reading_an_undeclared_type_is_a_validation_failure_that_names_system_type_and_fix() -> None:
    snoop = make_system("Snoop", 20, lambda ctx: ctx.get(Draft) and None)
    ctx = run_pipeline([make_system("Drafter", 10, lambda ctx: ctx.set(Draft("x")), writes=(Draft,)), snoop])
    message = _only_failure(ctx)
    assert "UndeclaredAccessError" in message and "'Snoop'" in message
    assert "declare Draft in reads (or optional_reads" in message


@pytest.mark.parametrize("action", [lambda ctx: ctx.set(Review(True)), lambda ctx: ctx.remove(Review)])
def test_writing_or_removing_an_undeclared_type_is_refused_and_lands_nothing(action: object) -> None:
    ctx = run_pipeline([make_system("Sneak", 10, action, reads=(Review,))], components=[Review(False)])  # type: ignore[arg-type]
    assert "declare Review in writes" in _only_failure(ctx)
    assert ctx.get(Review) == Review(False)


@pytest.mark.parametrize("check", ["get", "require", "has"])
def test_every_read_method_is_checked(check: str) -> None:
    ctx = run_pipeline([make_system("Peek", 10, lambda ctx: getattr(ctx, check)(Draft) and None)], components=[Draft("x")])
    assert "Draft" in _only_failure(ctx)


def test_should_process_is_held_to_the_declaration_too() -> None:
    class Picky(System):
        order = 10

        def should_process(self, ctx: AgentContext) -> bool:
            return ctx.has(Draft)

        def process(self, ctx: AgentContext) -> None:
            pass

    assert "'Picky'" in _only_failure(run_pipeline([Picky()]))


def test_declared_reads_optional_reads_writes_and_the_turn_inputs_are_open() -> None:
    seen: list[object] = []

    def touch(ctx: AgentContext) -> None:
        seen.extend([ctx.require(Session).id, ctx.require(IncomingMessage).text, ctx.get(Draft), ctx.get(Review)])
        ctx.set(Review(True))
        seen.append(ctx.require(Review))

    ctx = run_pipeline(
        [make_system("Reviewer", 10, touch, reads=(Draft,), optional_reads=(Review,), writes=(Review,))],
        "hi", session=Session("s1"), components=[Draft("d")],
    )
    assert ctx.failures == ()
    assert seen == ["s1", "hi", Draft("d"), None, Review(True)]


def test_outside_a_running_system_every_type_is_open() -> None:
    ctx = run_pipeline([make_system("Quiet", 10)])
    ctx.set(Draft("after the turn"))
    assert ctx.require(Draft) == Draft("after the turn") and ctx.components()[-1] == Draft("after the turn")
    loose = make_context(components=[Review(True)])
    assert loose.has(Review) and loose.get(Review) == Review(True)


def test_run_system_checks_like_the_loop_and_lifts_the_check_afterwards() -> None:
    ctx = make_context(components=[Draft("x")])
    with pytest.raises(UndeclaredAccessError, match="system 'Snoop' reads Draft"):
        run_system_sync(make_system("Snoop", 10, lambda c: c.get(Draft) and None), ctx)
    assert ctx.get(Draft) == Draft("x") and ctx.current_system is None


def test_a_running_system_lists_only_the_components_it_may_read() -> None:
    listed: list[tuple[object, ...]] = []
    run_pipeline(
        [make_system("Lister", 10, lambda ctx: listed.append(ctx.components()), reads=(Draft,))],
        components=[Draft("x"), Review(True)],
    )
    assert [type(c) for c in listed[0]] == [Session, IncomingMessage, Draft]


def test_an_optional_read_written_only_later_is_an_ordering_mistake() -> None:
    with pytest.raises(PipelineError, match="Early .order 10. reads Draft, which is written only by Late .order 20."):
        AgentLoop([make_system("Early", 10, optional_reads=(Draft,)), make_system("Late", 20, writes=(Draft,))])


def test_an_optional_read_from_an_earlier_writer_a_turn_input_or_nobody_builds() -> None:
    AgentLoop([make_system("Writer", 10, writes=(Draft,)), make_system("Reader", 20, optional_reads=(Draft,))])
    AgentLoop([make_system("Reader", 10, optional_reads=(Draft,)), make_system("W", 20, writes=(Draft,))], inputs=(Draft,))
    AgentLoop([make_system("Reader", 10, optional_reads=(Review,))])


def test_optional_reads_must_be_a_tuple_of_types() -> None:
    with pytest.raises(PipelineError, match="`optional_reads` must be a tuple of types"):
        AgentLoop([make_system("Bad", 10, optional_reads=[Draft])])  # type: ignore[arg-type]


def test_describe_marks_optional_reads_and_draws_their_arrows() -> None:
    loop = AgentLoop([make_system("Writer", 10, writes=(Draft,)), make_system("Reader", 20, reads=(Review,), optional_reads=(Draft,))])
    text = loop.describe().to_text()
    assert "Review, Draft?" in text
    assert "s0 -. Draft .-> s1" in loop.describe().to_mermaid()
