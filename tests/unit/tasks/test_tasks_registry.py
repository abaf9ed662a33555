"""Tests for agentloop.tasks.registry: registration, look-up, scripts and validate_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.tasks.errors import (
    ContextManagementWarning,
    ScriptsNotAllowedError,
    TemplateError,
    UnknownTemplateError,
)
from agentloop.tasks import AtomicTemplate, TemplateRegistry, validate_path

ATOMIC = '<task name="{name}" type="atomic"><description>Do {{{{x}}}}</description></task>'
SCRIPT = '<task name="run" type="script"><description>Run</description><command><arg>true</arg></command></task>'
BLIND = (
    '<task name="blind" type="atomic"><description>Guess</description>'
    "<context_management><inherit_context>none</inherit_context></context_management></task>"
)


def test_register_a_string_and_look_it_up_by_name() -> None:
    registry = TemplateRegistry()
    loaded = registry.register_string(ATOMIC.format(name="one"))
    template = registry.get("one")
    assert isinstance(template, AtomicTemplate) and loaded.templates == (template,)
    assert "one" in registry and len(registry) == 1 and registry.names() == ("one",)


def test_an_unknown_name_lists_what_is_registered() -> None:
    registry = TemplateRegistry()
    registry.register_string(ATOMIC.format(name="one"))
    with pytest.raises(UnknownTemplateError, match=r"no task template named 'two' is registered \(registered: one\)"):
        registry.get("two")


def test_a_directory_registers_every_file_or_none(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(ATOMIC.format(name="a"))
    (tmp_path / "b.xml").write_text(ATOMIC.format(name="b"))
    registry = TemplateRegistry()
    registry.register_directory(tmp_path)
    assert registry.names() == ("a", "b")
    (tmp_path / "c.xml").write_text("<task")
    fresh = TemplateRegistry()
    with pytest.raises(TemplateError, match="c.xml line 1"):
        fresh.register_directory(tmp_path)
    assert len(fresh) == 0


def test_a_duplicate_name_names_where_the_first_came_from(tmp_path: Path) -> None:
    first = tmp_path / "first.xml"
    first.write_text(ATOMIC.format(name="same"))
    registry = TemplateRegistry()
    registry.register_file(first)
    with pytest.raises(TemplateError, match=r"a template named 'same' is already registered from .*first.xml line 1"):
        registry.register_string(ATOMIC.format(name="same"), source="second.xml")


def test_scripts_are_refused_unless_allowed() -> None:
    with pytest.raises(ScriptsNotAllowedError, match="script task 'run' is refused") as caught:
        TemplateRegistry().register_string(SCRIPT, source="s.xml")
    assert (caught.value.file, caught.value.line) == ("s.xml", 1)
    assert isinstance(caught.value, TemplateError)
    allowed = TemplateRegistry(allow_scripts=True)
    allowed.register_string(SCRIPT)
    assert "run" in allowed


def test_a_script_inside_a_sequence_is_refused_too() -> None:
    nested = (
        '<task name="seq" type="sequential"><description>x</description><steps>'
        '<task name="inner-run" type="script"><description>r</description><command><arg>true</arg></command></task>'
        "</steps></task>"
    )
    with pytest.raises(ScriptsNotAllowedError, match="'inner-run'"):
        TemplateRegistry().register_string(nested)


def test_the_no_context_warning_is_warned_and_returned() -> None:
    registry = TemplateRegistry()
    with pytest.warns(ContextManagementWarning, match="b.xml line 1: inherit_context=none"):
        loaded = registry.register_string(BLIND, source="b.xml")
    assert [str(w) for w in loaded.warnings] == [
        "template b.xml line 1: inherit_context=none with no accumulation and fresh_context=disabled "
        "gives the task no context at all"
    ]


def test_validate_path_reports_errors_and_warnings_per_file(tmp_path: Path) -> None:
    (tmp_path / "good.xml").write_text(ATOMIC.format(name="good"))
    (tmp_path / "blind.xml").write_text(BLIND)
    (tmp_path / "bad.xml").write_text('<task name="bad" type="loop"><description>x</description></task>')
    report = validate_path(tmp_path)
    assert not report.ok
    assert [e.file.rsplit("/", 1)[-1] for e in report.errors] == ["bad.xml"]
    assert [w.file.rsplit("/", 1)[-1] for w in report.warnings] == ["blind.xml"]
    assert report.lines()[0].startswith("error: template ") and report.lines()[1].startswith("warning: template ")
    assert validate_path(tmp_path / "good.xml").ok
