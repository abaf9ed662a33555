"""Read a function's docstring into its summary and one description per parameter.

Google (`Args:`), numpy (`Parameters` underlined with dashes) and Sphinx (`:param x:`) styles are
understood, so a tool's parameters are described to the model where its author already wrote it.
"""

from __future__ import annotations

import inspect
import re

import attrs

_SECTIONS = (
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "other parameters",
    "returns", "return", "yields", "raises", "examples", "example", "notes", "note", "see also", "warnings",
    "references", "attributes",
)
_PARAMETER_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                       "other parameters"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


@attrs.frozen
class Docstring:
    """A docstring's summary (everything before its first section) and its parameter descriptions."""

    description: str
    parameters: dict[str, str]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _section(lines: list[str], i: int) -> tuple[str, int] | None:
    """The section that starts at line `i` and the line its body starts at, if one does."""
    text = lines[i].strip()
    name = text.rstrip(":").strip().lower()
    if name not in _SECTIONS:
        return None
    if text.endswith(":"):
        return name, i + 1
    if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()):
        return name, i + 2
    return None


def _entries(body: list[str], entry: re.Pattern[str], *, inline: bool) -> dict[str, str]:
    """Parameter descriptions from a section body: an entry line at the body's least indentation,
    continued by the more indented lines after it (`inline`: the entry line holds text too)."""
    filled = [line for line in body if line.strip()]
    if not filled:
        return {}
    base = min(_indent(line) for line in filled)
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in filled:
        match = entry.match(line.strip()) if _indent(line) == base else None
        if match is not None:
            current = found.setdefault(match.group(1), [])
            if inline and match.group(2):
                current.append(match.group(2).strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(words) for name, words in found.items() if words}


def parse_docstring(doc: str | None) -> Docstring:
    """The summary and parameter descriptions of `doc` (cleaned like `inspect.cleandoc`)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    parameters: dict[str, str] = {}
    end = len(lines)
    i = 0
    while i < len(lines):
        sphinx = _SPHINX_PARAM.match(lines[i].strip())
        section = _section(lines, i)
        if sphinx is not None or lines[i].strip().startswith(":"):
            end = min(end, i)
            if sphinx is not None:
                words = [sphinx.group(2).strip()]
                while i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].strip().startswith(":"):
                    i += 1
                    words.append(lines[i].strip())
                parameters[sphinx.group(1)] = " ".join(w for w in words if w)
            i += 1
            continue
        if section is None:
            i += 1
            continue
        end = min(end, i)
        name, start = section
        stop = start
        header_indent = _indent(lines[i])
        numpy = start == i + 2
        while stop < len(lines) and _section(lines, stop) is None and (
            numpy or not lines[stop].strip() or _indent(lines[stop]) > header_indent
        ):
            stop += 1
        if name in _PARAMETER_SECTIONS:
            pattern = _NUMPY_ENTRY if numpy else _GOOGLE_ENTRY
            parameters.update(_entries(lines[start:stop], pattern, inline=not numpy))
        i = stop
    return Docstring("\n".join(lines[:end]).strip(), parameters)
