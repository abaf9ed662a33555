"""Tests for agentloop.tasks.loader: the format, its errors, and hostile input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from agentloop.tasks.errors import TemplateError
from agentloop.tasks import (
    AtomicTemplate,
    InheritContext,
    ReduceTemplate,
    ScriptTemplate,
    SequentialTemplate,
    load_bytes,
    load_file,
    load_string,
    schema,
    validate_path,
)
from agentloop.tasks.loader import MAX_NESTING, _parser

HOSTILE = Path(__file__).parent / "hostile_templates"
ROOT = Path(__file__).parents[3]

DESIGN_FORMS = """<templates>
  <task name="summarize" type="atomic">            <!-- subtype="standard|subtask" -->
    <description>Summarize {{text}} in three bullet points</description>
    <inputs><input name="text"/></inputs>
  </task>
  <task name="report" type="sequential">
    <description>Gather facts, then write the report</description>
    <context_management>                            <!-- any subset of the four -->
      <inherit_context>none</inherit_context>
      <accumulate_data>true</accumulate_data>
      <accumulation_format>full_output</accumulation_format>
      <fresh_context>disabled</fresh_context>
    </context_management>
    <steps>
      <task type="atomic"><description>List facts about {{topic}}</description></task>
      <task type="atomic"><description>Write the report</description></task>
    </steps>
  </task>
  <task name="total" type="reduce">
    <description>Combine the chapters</description>
    <inner_task><task type="atomic"><description>Summarize {{item}}</description></task></inner_task>
    <reduction_task><task type="atomic"><description>Merge {{accumulator}} with {{current}}</description></task></reduction_task>
  </task>
  <task name="count-lines" type="script">
    <description>Count lines</description>
    <command><arg>wc</arg><arg>-l</arg><arg>{{path}}</arg></command>
  </task>
</templates>"""


def test_the_design_forms_load_into_one_template_per_operator() -> None:
    loaded = load_string(DESIGN_FORMS, source="design.xml")
    summarize, report, total, count = loaded.templates
    assert isinstance(summarize, AtomicTemplate) and summarize.inputs == ("text",)
    assert isinstance(report, SequentialTemplate) and len(report.steps) == 2
    assert report.context.inherit_context is InheritContext.NONE
    assert isinstance(total, ReduceTemplate) and total.reduction.description == "Merge {{accumulator}} with {{current}}"
    assert isinstance(count, ScriptTemplate) and count.command == ("wc", "-l", "{{path}}")
    assert (summarize.source.file, summarize.source.line, count.source.line) == ("design.xml", 2, 24)
    assert loaded.warnings == ()


def test_the_shipped_schema_accepts_the_design_forms_and_rejects_what_the_format_lacks() -> None:
    assert schema().validate(etree.fromstring(DESIGN_FORMS.encode()))
    unknown = '<task name="a" type="atomic"><description>x</description><extra/></task>'
    assert not schema().validate(etree.fromstring(unknown.encode()))
    assert (ROOT / "agentloop" / "tasks" / "task_template.rng").is_file()


@pytest.mark.parametrize(
    ("file", "line", "fragment"),
    [
        ("unclosed_tag.xml", 3, "is not well-formed XML"),
        ("unknown_operator.xml", 1, "unknown task type 'map'; use one of atomic, sequential, reduce, script"),
        ("wrong_enum_value.xml", 4, "accumulation_format must be notes_only or full_output, not 'everything'"),
        ("wrong_boolean.xml", 3, "accumulate_data must be true or false, not 'yes'"),
        ("external_entity.xml", 2, "declares <!DOCTYPE; templates may not have a DOCTYPE, DTD or entities"),
        ("billion_laughs.xml", 2, "declares <!DOCTYPE"),
        ("unknown_element.xml", 3, "<secret_agenda> is not allowed in a atomic task"),
        ("bad_name.xml", 1, "task name '../../etc' must be"),
        ("undefined_entity.xml", 1, "is not well-formed XML: Entity 'undefined' not defined"),
        ("bad_timeout.xml", 3, "timeout must be a number of seconds above 0"),
        ("not_utf8.xml", 1, "is not UTF-8 text"),
        ("empty.xml", 1, "is not well-formed XML: Document is empty"),
    ],
)
def test_each_hostile_template_fails_with_file_line_and_reason(file: str, line: int, fragment: str) -> None:
    with pytest.raises(TemplateError) as caught:
        load_file(HOSTILE / file)
    error = caught.value
    assert error.file.endswith(file) and error.line == line
    assert fragment in str(error)
    assert str(error).startswith(f"template {HOSTILE / file} line {line}: ")
    assert ", column" not in str(error)


def test_every_hostile_file_is_reported_by_validate_path() -> None:
    report = validate_path(HOSTILE)
    assert not report.ok
    assert len(report.errors) == len(report.files) == len(list(HOSTILE.glob("*.xml")))


def test_the_hardened_parser_does_not_read_files_through_external_entities(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    document = f'<!DOCTYPE t [<!ENTITY x SYSTEM "{secret.as_uri()}">]><t>&x;</t>'.encode()
    root = etree.fromstring(document, _parser())
    assert b"TOPSECRET" not in etree.tostring(root)


def test_the_hardened_parser_does_not_expand_a_billion_laughs() -> None:
    data = (HOSTILE / "billion_laughs.xml").read_bytes()
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        assert "amplification" in str(exc) or "entity" in str(exc).lower()
    else:
        assert len(etree.tostring(root)) < 10_000


def test_a_50_megabyte_template_is_refused_unread_with_little_memory(tmp_path: Path) -> None:
    big = tmp_path / "huge.xml"
    chunk = b"<task>" + b"x" * (1 << 20)
    with big.open("wb") as handle:
        for _ in range(50):
            handle.write(chunk)
    probe = (
        "import json, resource, sys\n"
        "from agentloop.tasks import load_file, TemplateError\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    load_file(sys.argv[1])\n"
        "except TemplateError as exc:\n"
        "    message = str(exc)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'grew_kib': after - before, 'message': message}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(big)], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert "is larger than the 1048576-byte limit for templates" in measured["message"]
    assert measured["grew_kib"] < 8 * 1024


def test_a_string_over_the_limit_is_refused() -> None:
    with pytest.raises(TemplateError, match="is larger than the 100-byte limit"):
        load_string("<task>" + "x" * 200 + "</task>", max_bytes=100)


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    inner = '<task type="atomic"><description>x</description></task>'
    for _ in range(MAX_NESTING):
        inner = f'<task type="sequential"><description>s</description><steps>{inner}</steps></task>'
    document = inner.replace("<task ", '<task name="deep" ', 1)
    with pytest.raises(TemplateError, match=f"nested more than {MAX_NESTING} deep"):
        load_string(document)


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ('<task type="atomic"><description>x</description></task>', "a top-level <task> needs a name"),
        ('<task name="a"><description>x</description></task>', "<task> needs a type attribute"),
        ('<task name="a" type="atomic"/>', "a <task> needs a <description>"),
        ('<task name="a" type="atomic"><description> </description></task>', "<description> is empty"),
        ('<task name="a" type="sequential"><description>x</description></task>', "needs a <steps> element"),
        ('<task name="a" type="sequential"><description>x</description><steps/></task>', "<steps> holds no <task>"),
        ('<task name="a" type="script"><description>x</description><command/></task>', "needs at least one <arg>"),
        ('<task name="a" type="atomic" over="x"><description>x</description></task>', "unknown attribute 'over'"),
        ('<task name="a" type="atomic" subtype="main"><description>x</description></task>', "subtype must be standard or subtask"),
        ('<task name="a" type="atomic"><description>x</description><description>y</description></task>', "appears twice"),
        ('<task name="a" type="atomic">text<description>x</description></task>', "may not hold text"),
        ('<other/>', "the root element must be <task> or <templates>"),
        ('<task name="a" type="atomic"><description>x</description><inputs><input name="1x"/></inputs></task>', "<input> needs"),
        (
            '<task name="a" type="reduce"><description>x</description>'
            '<inner_task><task type="atomic"><description>a</description></task>'
            '<task type="atomic"><description>b</description></task></inner_task>'
            '<reduction_task><task type="atomic"><description>c</description></task></reduction_task></task>',
            "<inner_task> holds exactly one <task>",
        ),
    ],
)
def test_format_mistakes_are_plain_sentences(document: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match="^template <string> line 1: ") as caught:
        load_string(document)
    assert fragment in str(caught.value)


_names = st.sampled_from(["a", "b-1", "c.2", "", "../x", "x y"])
_types = st.sampled_from(["atomic", "sequential", "reduce", "script", "map", ""])
_values = st.sampled_from(["full", "none", "subset", "true", "false", "notes_only", "full_output", "enabled", "disabled", "?"])
_settings = st.sampled_from(["inherit_context", "accumulate_data", "accumulation_format", "fresh_context", "bogus"])


def _rarely(draw: st.DrawFn) -> bool:
    """True about one time in eight: how often a generated template goes wrong in one place."""
    return draw(st.integers(0, 7)) == 0


@st.composite
def _task(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(_types) if _rarely(draw) else draw(st.sampled_from(["atomic", "sequential", "reduce", "script"]))
    attributes = f'type="{kind}"'
    if depth == 0 or draw(st.booleans()):
        attributes += f' name="{draw(_names) if _rarely(draw) else draw(st.sampled_from(["a", "b-1", "c.2"]))}"'
    if kind == "atomic" and draw(st.booleans()):
        attributes += f' subtype="{draw(st.sampled_from(["standard", "subtask", "x"]))}"'
    parts = []
    if not _rarely(draw):
        parts.append(f"<description>{draw(st.sampled_from(['Do {{x}}', 'plain', '']))}</description>")
    if draw(st.booleans()):
        settings_xml = "".join(f"<{s}>{draw(_values)}</{s}>" for s in draw(st.lists(_settings, max_size=3, unique=True)))
        parts.append(f"<context_management>{settings_xml}</context_management>")
    child = (lambda: draw(_task(depth + 1))) if depth < 2 else (lambda: '<task type="atomic"><description>d</description></task>')
    if kind == "sequential" and not _rarely(draw):
        parts.append("<steps>" + "".join(child() for _ in range(draw(st.integers(1, 2)))) + "</steps>")
    if kind == "reduce" and not _rarely(draw):
        parts.append(f"<inner_task>{child()}</inner_task><reduction_task>{child()}</reduction_task>")
    if kind == "script" and not _rarely(draw) or _rarely(draw):
        args = draw(st.lists(st.sampled_from(["wc", "{{p}}", ""]), min_size=1, max_size=3))
        parts.append("<command>" + "".join(f"<arg>{a}</arg>" for a in args) + "</command>")
    return f"<task {attributes}>{''.join(draw(st.permutations(parts)))}</task>"


@st.composite
def _documents(draw: st.DrawFn) -> bytes:
    data = draw(_task()).encode()
    if _rarely(draw):
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=8)) + data[cut + draw(st.integers(0, 4)) :]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents() | st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_generated_templates_load_or_raise_only_template_errors(data: bytes) -> None:
    """Any bytes either load or raise TemplateError, never anything else; and the loader's
    own checks catch everything the schema would, so errors are always plain sentences."""
    try:
        loaded = load_bytes(data, source="generated.xml")
    except TemplateError as exc:
        assert str(exc).startswith("template generated.xml")
        assert "does not match the template schema" not in str(exc)
    else:
        assert loaded.templates
