"""The import rules between agentloop, its domain packages and systems (docs/architecture.md), checked on the source tree."""

from __future__ import annotations

import ast
import re
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_AGENTLOOP_MODULES = {
    "agentloop",
    "agentloop.ports",
    "agentloop.adapters",
    "agentloop.notes",
    "agentloop.tasks",
    "agentloop.testing",
}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import statement in `path`, including nested ones."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def imported_names(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) for every `from module import name` in `path` (`from agentloop import cli`)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield from ((node.lineno, node.module, alias.name) for alias in node.names)


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


SYSTEMS_IMPORTERS = {"agentloop/bots.py"}
"""The composition root: the only modules of agentloop allowed to import systems."""


@pytest.mark.parametrize("path", sources("agentloop"), ids=lambda p: str(p.relative_to(ROOT)))
def test_agentloop_never_imports_systems_except_the_composition_root(path: Path) -> None:
    if str(path.relative_to(ROOT)) in SYSTEMS_IMPORTERS:
        return
    bad = [(line, module) for line, module in imports(path) if module.split(".")[0] == "systems"]
    assert bad == [], f"{path.relative_to(ROOT)} imports systems; only {' and '.join(sorted(SYSTEMS_IMPORTERS))} may"


@pytest.mark.parametrize("path", sources("agentloop/serve"), ids=lambda p: str(p.relative_to(ROOT)))
def test_serve_builds_its_bots_through_agentloop_bots_not_the_cli(path: Path) -> None:
    """The server once reused the argparse command's functions (and so loaded the whole CLI) to open its bot."""
    named = [
        (line, f"{module}.{name}") for line, module, name in imported_names(path) if module == "agentloop"
    ] + list(imports(path))
    bad = [(line, module) for line, module in named if module == "agentloop.cli" or module.startswith("agentloop.cli.")]
    assert bad == [], f"{path.relative_to(ROOT)} imports the CLI; build bots with agentloop.bots"


@pytest.mark.parametrize("path", sources("systems"), ids=lambda p: str(p.relative_to(ROOT)))
def test_systems_import_only_public_agentloop_names(path: Path) -> None:
    bad = [
        (line, module)
        for line, module in imports(path)
        if module.split(".")[0] == "agentloop" and module not in PUBLIC_AGENTLOOP_MODULES
    ]
    assert bad == [], f"{path.relative_to(ROOT)} reaches past agentloop's public exports: {bad}"


@pytest.mark.parametrize(
    "path", sources("agentloop/notes") + sources("agentloop/tasks"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_domain_packages_depend_on_ports_not_adapters(path: Path) -> None:
    bad = [(line, module) for line, module in imports(path) if module.startswith("agentloop.adapters")]
    assert bad == [], f"{path.relative_to(ROOT)} imports a concrete adapter; depend on agentloop.ports"


@pytest.mark.parametrize("path", sources("agentloop"), ids=lambda p: str(p.relative_to(ROOT)))
def test_library_code_never_imports_the_test_kit(path: Path) -> None:
    """The demo and the CLI once took the scripted model from the test kit; it is a model like the others now."""
    relative = str(path.relative_to(ROOT))
    if relative.startswith("agentloop/testing/"):
        return
    bad = [(line, module) for line, module in imports(path) if module.startswith("agentloop.testing")]
    assert bad == [], f"{relative} imports agentloop.testing; library code may not (docs/architecture.md)"


def test_importing_systems_does_not_load_the_task_subsystem() -> None:
    """Systems learn how to treat a task turn from its TurnPolicy, never from task types."""
    code = "import sys, systems; print(sorted(m for m in sys.modules if m.startswith('agentloop.tasks')))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=True, timeout=120,
    )
    assert result.stdout.strip() == "[]"


def test_the_conformance_suite_and_the_stores_bundle_load_no_backend() -> None:
    """A backend's tests import the suite and `Stores` without loading SQLite's or PostgreSQL's adapters."""
    code = (
        "import sys, agentloop.testing.stores, agentloop.ports; "
        "print(sorted(m for m in sys.modules if m.startswith(('agentloop.adapters.sqlite', 'agentloop.adapters.postgres', 'hnswlib'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=True, timeout=120,
    )
    assert result.stdout.strip() == "[]"


LIFECYCLE_RULES = {"agentloop.notes.lifecycle", "agentloop.tasks.lifecycle"}
"""Where the note and task lifecycles are decided; a backend only compares and sets."""


@pytest.mark.parametrize("path", sources("agentloop/adapters"), ids=lambda p: str(p.relative_to(ROOT)))
def test_adapters_leave_the_lifecycle_rules_to_the_domain(path: Path) -> None:
    """The knowledge adapter once checked note transitions itself, so another backend could forget them."""
    bad = [(line, module) for line, module in imports(path) if module in LIFECYCLE_RULES]
    assert bad == [], f"{path.relative_to(ROOT)} imports a lifecycle rule module; let agentloop.notes / agentloop.tasks decide"


SQLITE_CLASS = re.compile(r"\b(?:Sqlite\w*(?:Store|Repository)|Bot" r"Stores)\b")
"""A concrete SQLite adapter class (or the bundle that exposed them before `open_stores`)."""


def _names_sqlite_classes_legitimately(relative: str) -> bool:
    """Where a SQLite class may be named: the adapters themselves, the storage page that
    explains the SQLite backend, and the tests about SQLite itself (its stores, its index
    files, the databases of earlier releases and their migration)."""
    name = relative.rsplit("/", 1)[-1]
    return (
        relative.startswith(("agentloop/adapters/", "tests/fixtures/"))
        or relative == "docs/storage.md"
        or (relative.startswith("tests/") and (name.startswith("test_sqlite") or name == "test_hnsw_index.py" or "migration" in name))
    )


def test_no_concrete_sqlite_store_is_named_outside_the_adapters_and_the_sqlite_tests() -> None:
    """Everything that needs storage takes a `Stores` or a URL, so a second backend needs
    no change outside its adapter package."""
    files = [ROOT / "README.md"] + [
        path for folder in ("agentloop", "systems", "docs", "benchmarks", "tests")
        for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".md", ".feature")
    ]
    named = [
        f"{relative}:{number}: {match.group(0)}"
        for path in files
        if not _names_sqlite_classes_legitimately(relative := str(path.relative_to(ROOT)))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in SQLITE_CLASS.finditer(line)
    ]
    assert named == [], "open the stores with open_stores(url) and use their ports:\n" + "\n".join(named)
