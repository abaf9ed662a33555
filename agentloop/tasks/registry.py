"""TemplateRegistry: templates by name, registered from files, strings or directories.

Every check happens at registration; a registered template runs without further
resolution. Script tasks are refused unless the registry was created with
`allow_scripts=True`. Warnings (a task that would see no context at all) are returned
on the `LoadedTemplates` of each registration and also issued with `warnings.warn` as a
`ContextManagementWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import attrs

from agentloop._log import get_logger
from agentloop.tasks.errors import (
    ContextManagementWarning,
    ScriptsNotAllowedError,
    TemplateError,
    UnknownTemplateError,
)
from agentloop.tasks.loader import (
    DEFAULT_MAX_BYTES,
    LoadedTemplates,
    TemplateNotice,
    load_file,
    load_string,
)
from agentloop.tasks.template import TaskTemplate, contains_script

_log = get_logger("agentloop.tasks")


def refuse_script(template: TaskTemplate) -> None:
    """Raise `ScriptsNotAllowedError` if the template is or holds a script task."""
    script = contains_script(template)
    if script is not None:
        raise ScriptsNotAllowedError(
            f"script task {script.label!r} is refused: scripts run external commands, so they "
            f"need a TemplateRegistry created with allow_scripts=True",
            file=script.source.file,
            line=script.source.line,
        )


class TemplateRegistry:
    """Named task templates. Register files, strings or directories; look up with `get`."""

    def __init__(self, *, allow_scripts: bool = False, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.allow_scripts = allow_scripts
        self.max_bytes = max_bytes
        self._templates: dict[str, TaskTemplate] = {}

    def register_file(self, path: str | Path) -> LoadedTemplates:
        return self._add(load_file(path, max_bytes=self.max_bytes))

    def register_string(self, text: str, *, source: str = "<string>") -> LoadedTemplates:
        return self._add(load_string(text, source=source, max_bytes=self.max_bytes))

    def register_directory(self, path: str | Path, pattern: str = "*.xml") -> LoadedTemplates:
        """Register every matching file (sorted by name); nothing is registered if one fails."""
        files = sorted(Path(path).glob(pattern))
        loaded = [load_file(file, max_bytes=self.max_bytes) for file in files]
        merged = LoadedTemplates(
            tuple(t for batch in loaded for t in batch.templates), tuple(w for batch in loaded for w in batch.warnings)
        )
        return self._add(merged)

    def register(self, template: TaskTemplate) -> None:
        """Register one already-built template under its name."""
        self._add(LoadedTemplates((template,)))

    def _add(self, loaded: LoadedTemplates) -> LoadedTemplates:
        seen: dict[str, TaskTemplate] = {}
        for template in loaded.templates:
            if template.name is None:
                raise TemplateError("a registered template needs a name", file=template.source.file, line=template.source.line)
            earlier = self._templates.get(template.name) or seen.get(template.name)
            if earlier is not None:
                raise TemplateError(
                    f"a template named {template.name!r} is already registered from {earlier.source}",
                    file=template.source.file,
                    line=template.source.line,
                )
            if not self.allow_scripts:
                refuse_script(template)
            seen[template.name] = template
        self._templates.update(seen)
        for notice in loaded.warnings:
            warnings.warn(ContextManagementWarning(str(notice)), stacklevel=3)
        _log.debug("templates.registered", names=sorted(seen), warnings=len(loaded.warnings))
        return loaded

    def get(self, name: str) -> TaskTemplate:
        try:
            return self._templates[name]
        except KeyError:
            raise UnknownTemplateError(name, self.names()) from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._templates))

    def __contains__(self, name: object) -> bool:
        return name in self._templates

    def __iter__(self) -> Iterator[TaskTemplate]:
        return iter(self._templates.values())

    def __len__(self) -> int:
        return len(self._templates)


@attrs.frozen
class ValidationReport:
    """What `validate_path` found: one error per failing file, and every warning."""

    files: tuple[str, ...]
    errors: tuple[TemplateError, ...] = ()
    warnings: tuple[TemplateNotice, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    def lines(self) -> tuple[str, ...]:
        """Each error and warning as one line for a terminal."""
        return tuple(f"error: {e}" for e in self.errors) + tuple(f"warning: {w}" for w in self.warnings)


def validate_path(path: str | Path, *, allow_scripts: bool = True, max_bytes: int = DEFAULT_MAX_BYTES) -> ValidationReport:
    """Check a template file, or every `*.xml` under a directory, registering nothing.

    What `agentloop templates validate PATH` reports; names must also be unique across
    the files checked together.
    """
    path = Path(path)
    files = sorted(path.rglob("*.xml")) if path.is_dir() else [path]
    registry = TemplateRegistry(allow_scripts=allow_scripts, max_bytes=max_bytes)
    errors: list[TemplateError] = []
    notices: list[TemplateNotice] = []
    for file in files:
        try:
            loaded = load_file(file, max_bytes=max_bytes)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ContextManagementWarning)
                registry._add(loaded)
        except TemplateError as exc:
            errors.append(exc)
        else:
            notices.extend(loaded.warnings)
    return ValidationReport(tuple(str(f) for f in files), tuple(errors), tuple(notices))
