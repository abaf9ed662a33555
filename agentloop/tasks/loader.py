"""Loading task templates from XML: a hardened lxml parse, plain-sentence checks, the schema.

Hostile input is refused before it can cost anything: the size is capped before parsing
(at most `max_bytes + 1` bytes are read), a DOCTYPE is refused (so no DTD and no entity,
internal or external, is ever declared), and the parser resolves no entities, loads no
DTD, touches no network and keeps lxml's limits on huge trees. Every problem is a
`TemplateError` naming the file and, where there is one, the line.
"""

from __future__ import annotations

import enum
import re
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import attrs
from lxml import etree

from agentloop._names import SAFE_NAME_RULE, is_safe_name
from agentloop.tasks.errors import TemplateError
from agentloop.tasks.settings import (
    AccumulationFormat,
    ContextOverrides,
    FreshContext,
    InheritContext,
    Operator,
    Position,
    Subtype,
    check,
    resolve,
)
from agentloop.tasks.template import (
    AtomicTemplate,
    ReduceTemplate,
    ScriptTemplate,
    SequentialTemplate,
    SourceLocation,
    TaskTemplate,
)

_E = TypeVar("_E", bound=enum.Enum)

DEFAULT_MAX_BYTES = 1_048_576
"""Templates larger than this (1 MiB) are refused unread."""
MAX_NESTING = 32
"""Tasks nested deeper than this are refused."""
MAX_SCRIPT_TIMEOUT = 3600.0

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_FORBIDDEN_DECLARATIONS = re.compile(r"<!(DOCTYPE|ENTITY)")
_POSITION = re.compile(r", line \d+, column \d+$")
_OPERATORS = ", ".join(op.value for op in Operator)
_COMMON_CHILDREN = ("description", "inputs", "context_management")
_OPERATOR_CHILDREN: dict[Operator, tuple[str, ...]] = {
    Operator.ATOMIC: (),
    Operator.SEQUENTIAL: ("steps",),
    Operator.REDUCE: ("inner_task", "reduction_task"),
    Operator.SCRIPT: ("command",),
}
_OPERATOR_ATTRIBUTES: dict[Operator, tuple[str, ...]] = {
    Operator.ATOMIC: ("subtype",),
    Operator.SEQUENTIAL: (),
    Operator.REDUCE: ("over",),
    Operator.SCRIPT: (),
}


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        dtd_validation=False,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


_SCHEMA: etree.RelaxNG | None = None


def schema() -> etree.RelaxNG:
    """The RELAX NG schema of the format, shipped as `agentloop/tasks/task_template.rng`."""
    global _SCHEMA
    if _SCHEMA is None:
        data = resources.files("agentloop.tasks").joinpath("task_template.rng").read_bytes()
        _SCHEMA = etree.RelaxNG(etree.fromstring(data, _parser()))
    return _SCHEMA


@attrs.frozen
class TemplateNotice:
    """A warning about a template that loaded: where, and what is probably wrong."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"template {self.file}" + (f" line {self.line}" if self.line is not None else "")
        return f"{where}: {self.message}"


@attrs.frozen
class LoadedTemplates:
    """What one file or string held: its templates (in order) and the warnings found."""

    templates: tuple[TaskTemplate, ...]
    warnings: tuple[TemplateNotice, ...] = ()


def read_capped(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes, reading at most `max_bytes + 1`; a larger file is refused."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise TemplateError(f"cannot be read ({exc.strerror or exc})", file=source) from None
    if len(data) > max_bytes:
        raise TemplateError(f"is larger than the {max_bytes}-byte limit for templates", file=source)
    return data


def load_file(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedTemplates:
    """Load every template in one file."""
    path = Path(path)
    return load_bytes(read_capped(path, max_bytes), source=str(path), max_bytes=max_bytes)


def load_string(text: str, *, source: str = "<string>", max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedTemplates:
    """Load every template in an XML string (`source` names it in errors)."""
    if len(text) > max_bytes:
        raise TemplateError(f"is larger than the {max_bytes}-byte limit for templates", file=source)
    return load_bytes(text.encode("utf-8", errors="surrogatepass"), source=source, max_bytes=max_bytes)


def load_bytes(data: bytes, *, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedTemplates:
    """Parse (hardened), check and build the templates in `data`."""
    root = parse_document(data, source=source, max_bytes=max_bytes)
    return _Builder(source).build(root)


def parse_document(data: bytes, *, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> etree._Element:
    """The root element of `data` after the size cap, the DOCTYPE refusal and a hardened parse."""
    if len(data) > max_bytes:
        raise TemplateError(f"is larger than the {max_bytes}-byte limit for templates", file=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TemplateError("is not UTF-8 text; save templates as UTF-8", file=source, line=line) from None
    declaration = _FORBIDDEN_DECLARATIONS.search(text)
    if declaration is not None:
        line = text.count("\n", 0, declaration.start()) + 1
        raise TemplateError(
            f"declares <!{declaration.group(1)}; templates may not have a DOCTYPE, DTD or entities",
            file=source,
            line=line,
        )
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        message = _POSITION.sub("", exc.msg if isinstance(exc.msg, str) and exc.msg else str(exc))
        lineno = exc.lineno if isinstance(exc.lineno, int) and exc.lineno > 0 else None
        raise TemplateError(f"is not well-formed XML: {message}", file=source, line=lineno) from None
    if getattr(root.getroottree().docinfo, "doctype", ""):
        raise TemplateError("templates may not have a DOCTYPE, DTD or entities", file=source, line=1)
    return root


def _validate_schema(root: etree._Element, source: str) -> None:
    validator = schema()
    if validator.validate(root):
        return
    error = validator.error_log.last_error
    line = error.line if error is not None and error.line > 0 else None
    message = error.message if error is not None else "does not match the template schema"
    raise TemplateError(f"does not match the template schema: {message}", file=source, line=line)


class _Builder:
    """Walks a parsed document into templates, refusing what the format does not allow."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.notices: list[TemplateNotice] = []

    def fail(self, element: etree._Element, message: str) -> TemplateError:
        return TemplateError(message, file=self.source, line=_line(element))

    def build(self, root: etree._Element) -> LoadedTemplates:
        if root.tag == "task":
            tasks = [root]
        elif root.tag == "templates":
            self._no_text(root)
            if root.attrib:
                raise self.fail(root, f"<templates> takes no attributes, got {_first(root.attrib)!r}")
            tasks = list(root)
            if not tasks:
                raise self.fail(root, "<templates> holds no <task>")
            for child in tasks:
                if child.tag != "task":
                    raise self.fail(child, f"<templates> may hold only <task> elements, not <{_tag(child)}>")
        else:
            raise self.fail(root, f"the root element must be <task> or <templates>, not <{_tag(root)}>")
        templates = tuple(self.task(task, Position.TOP, depth=1) for task in tasks)
        _validate_schema(root, self.source)
        return LoadedTemplates(templates, tuple(self.notices))

    def task(self, element: etree._Element, position: Position, depth: int) -> TaskTemplate:
        if depth > MAX_NESTING:
            raise self.fail(element, f"tasks are nested more than {MAX_NESTING} deep")
        kind = element.get("type")
        if kind is None:
            raise self.fail(element, f"<task> needs a type attribute: one of {_OPERATORS}")
        operator = self._operator(element, kind)
        name = element.get("name")
        if name is None and position is Position.TOP:
            raise self.fail(element, "a top-level <task> needs a name attribute")
        if name is not None and not is_safe_name(name):
            raise self.fail(element, f"task name {name!r} must be {SAFE_NAME_RULE}, with no '..'")
        subtype = self._enum(element, "subtype", element.get("subtype", "standard"), Subtype)
        allowed = (*_COMMON_CHILDREN, *_OPERATOR_CHILDREN[operator])
        children = self._children(
            element, allowed, f"is not allowed in a {operator.value} task; allowed: {', '.join(allowed)}", "in one task"
        )
        description = self._description(element, children.get("description"))
        inputs = self._inputs(children["inputs"]) if "inputs" in children else ()
        overrides = self._overrides(children["context_management"]) if "context_management" in children else ContextOverrides()
        context = resolve(operator, subtype, position, overrides)
        found = check(operator, overrides, context)
        settings = children.get("context_management")
        if found.errors:
            problem = found.errors[0]
            raise self.fail(_setting_element(element, settings, problem.setting), problem.message)
        self.notices.extend(
            TemplateNotice(self.source, _line(_setting_element(element, settings, w.setting)), w.message)
            for w in found.warnings
        )
        common: dict[str, Any] = {
            "name": name,
            "description": description,
            "inputs": inputs,
            "overrides": overrides,
            "context": context,
            "source": SourceLocation(self.source, _line(element)),
        }
        if operator is Operator.ATOMIC:
            return AtomicTemplate(subtype=subtype, **common)
        if operator is Operator.SEQUENTIAL:
            steps = self._subtasks(self._required(element, children, "steps"), depth, Position.STEP, many=True)
            return SequentialTemplate(steps=steps, **common)
        if operator is Operator.REDUCE:
            over = element.get("over", "items")
            if not _VAR_NAME.fullmatch(over):
                raise self.fail(element, f"over={over!r} must name an input (letters, digits and '_')")
            (inner,) = self._subtasks(self._required(element, children, "inner_task"), depth, Position.REDUCE_INNER)
            (reduction,) = self._subtasks(
                self._required(element, children, "reduction_task"), depth, Position.REDUCE_REDUCTION
            )
            return ReduceTemplate(inner=inner, reduction=reduction, over=over, **common)
        command, timeout = self._command(self._required(element, children, "command"))
        return ScriptTemplate(command=command, timeout=timeout, **common)

    def _operator(self, element: etree._Element, kind: str) -> Operator:
        """The operator `type=` names, refusing an attribute that operator does not take."""
        try:
            operator = Operator(kind)
        except ValueError:
            raise self.fail(element, f"unknown task type {kind!r}; use one of {_OPERATORS}") from None
        allowed_attributes = ("name", "type", *_OPERATOR_ATTRIBUTES[operator])
        for attribute in element.attrib:
            if attribute not in allowed_attributes:
                raise self.fail(
                    element,
                    f"unknown attribute {_name(attribute)!r} on a {operator.value} <task>; "
                    f"allowed: {', '.join(allowed_attributes)}",
                )
        return operator

    def _children(
        self, element: etree._Element, allowed: tuple[str, ...], unknown: str, where: str
    ) -> dict[str, etree._Element]:
        """The child elements by tag, refusing text, tags not in `allowed` and repeats."""
        self._no_text(element)
        found: dict[str, etree._Element] = {}
        for child in element:
            tag = _tag(child)
            if tag not in allowed:
                raise self.fail(child, f"<{tag}> {unknown}")
            if tag in found:
                raise self.fail(child, f"<{tag}> appears twice {where}".rstrip())
            found[tag] = child
        return found

    def _required(self, element: etree._Element, children: dict[str, etree._Element], tag: str) -> etree._Element:
        if tag not in children:
            raise self.fail(element, f"a {element.get('type')} task needs a <{tag}> element")
        return children[tag]

    def _no_text(self, element: etree._Element) -> None:
        if element.text is not None and element.text.strip():
            raise self.fail(element, f"<{_tag(element)}> may not hold text, only elements")
        for child in element:
            if child.tail is not None and child.tail.strip():
                raise self.fail(child, f"unexpected text after <{_tag(child)}>")

    def _leaf_text(self, element: etree._Element) -> str:
        if len(element):
            raise self.fail(element[0], f"<{_tag(element)}> holds text only, not <{_tag(element[0])}>")
        if element.attrib:
            raise self.fail(element, f"<{_tag(element)}> takes no attributes, got {_first(element.attrib)!r}")
        return element.text or ""

    def _description(self, element: etree._Element, child: etree._Element | None) -> str:
        if child is None:
            raise self.fail(element, "a <task> needs a <description>")
        text = self._leaf_text(child).strip()
        if not text:
            raise self.fail(child, "<description> is empty")
        return text

    def _inputs(self, element: etree._Element) -> tuple[str, ...]:
        self._no_text(element)
        if element.attrib:
            raise self.fail(element, f"<inputs> takes no attributes, got {_first(element.attrib)!r}")
        names: list[str] = []
        for child in element:
            if child.tag != "input":
                raise self.fail(child, f"<inputs> may hold only <input name=...>, not <{_tag(child)}>")
            name = child.get("name")
            if name is None or not _VAR_NAME.fullmatch(name) or set(child.attrib) != {"name"} or len(child):
                raise self.fail(child, "<input> needs exactly a name attribute of letters, digits and '_'")
            if child.text is not None and child.text.strip():
                raise self.fail(child, "<input> may not hold text")
            if name in names:
                raise self.fail(child, f"input {name!r} is declared twice")
            names.append(name)
        return tuple(names)

    def _overrides(self, element: etree._Element) -> ContextOverrides:
        if element.attrib:
            raise self.fail(element, f"<context_management> takes no attributes, got {_first(element.attrib)!r}")
        fields = ("inherit_context", "accumulate_data", "accumulation_format", "fresh_context")
        settings = self._children(element, fields, f"is not a context setting; use {', '.join(fields)}", "")
        accumulate: bool | None = None
        if "accumulate_data" in settings:
            value = self._leaf_text(settings["accumulate_data"]).strip()
            if value not in ("true", "false"):
                raise self.fail(settings["accumulate_data"], f"accumulate_data must be true or false, not {value!r}")
            accumulate = value == "true"
        return ContextOverrides(
            inherit_context=self._setting(settings, "inherit_context", InheritContext),
            accumulate_data=accumulate,
            accumulation_format=self._setting(settings, "accumulation_format", AccumulationFormat),
            fresh_context=self._setting(settings, "fresh_context", FreshContext),
        )

    def _setting(self, settings: dict[str, etree._Element], tag: str, kind: type[_E]) -> _E | None:
        child = settings.get(tag)
        if child is None:
            return None
        return self._enum(child, tag, self._leaf_text(child).strip(), kind)

    def _enum(self, element: etree._Element, field: str, value: str, kind: type[_E]) -> _E:
        try:
            return kind(value)
        except ValueError:
            choices = " or ".join(str(member.value) for member in kind)
            raise self.fail(element, f"{field} must be {choices}, not {value!r}") from None

    def _subtasks(
        self, holder: etree._Element, depth: int, position: Position, *, many: bool = False
    ) -> tuple[TaskTemplate, ...]:
        self._no_text(holder)
        if holder.attrib:
            raise self.fail(holder, f"<{_tag(holder)}> takes no attributes, got {_first(holder.attrib)!r}")
        tasks = list(holder)
        for child in tasks:
            if child.tag != "task":
                raise self.fail(child, f"<{_tag(holder)}> may hold only <task> elements, not <{_tag(child)}>")
        if not tasks:
            raise self.fail(holder, f"<{_tag(holder)}> holds no <task>")
        if not many and len(tasks) > 1:
            raise self.fail(tasks[1], f"<{_tag(holder)}> holds exactly one <task>")
        return tuple(self.task(child, position, depth + 1) for child in tasks)

    def _command(self, element: etree._Element) -> tuple[tuple[str, ...], float | None]:
        self._no_text(element)
        timeout: float | None = None
        for attribute, value in element.attrib.items():
            if attribute != "timeout":
                raise self.fail(element, f"unknown attribute {_name(attribute)!r} on <command>; allowed: timeout")
            try:
                timeout = float(value)
            except ValueError:
                timeout = None
            if timeout is None or not 0 < timeout <= MAX_SCRIPT_TIMEOUT:
                raise self.fail(element, f"timeout must be a number of seconds above 0 and at most 3600, not {value!r}")
        argv: list[str] = []
        for child in element:
            if child.tag != "arg":
                raise self.fail(child, f"<command> may hold only <arg> elements, not <{_tag(child)}>")
            argv.append(self._leaf_text(child))
        if not argv or not argv[0].strip():
            raise self.fail(element, "<command> needs at least one <arg>, the program to run")
        return tuple(argv), timeout


def _setting_element(task: etree._Element, settings: etree._Element | None, setting: str) -> etree._Element:
    """The element a finding is about: the setting if written, else the block, else the task."""
    if settings is None:
        return task
    written = settings.find(setting)
    return written if written is not None else settings


def _line(element: etree._Element) -> int | None:
    line = getattr(element, "sourceline", None)
    return line if isinstance(line, int) else None


def _tag(element: etree._Element) -> str:
    tag = element.tag
    return _name(tag) if isinstance(tag, str) else repr(tag)


def _name(qualified: str | bytes) -> str:
    text = qualified.decode() if isinstance(qualified, bytes) else qualified
    return text.rsplit("}", 1)[-1]


def _first(attrib: etree._Attrib) -> str:
    keys = list(attrib.keys())
    return _name(str(keys[0])) if keys else ""
