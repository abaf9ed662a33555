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
    "agentloop.compaction",
    "agentloop.notes",
    "agentloop.tasks",
    "agentloop.testing",
    "agentloop.tokens",
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


SYSTEMS_INTERNAL_IMPORTS = {
    ("systems/tool_loop.py", "agentloop._containment"): "a tool's failure is contained by the loop's own rule",
    ("systems/tool_loop.py", "agentloop._text"): "tool output is cut by the rule the docs state for max_tool_output_bytes, and stored as all text is",
    ("systems/tool_loop.py", "agentloop._names"): "turn, step and tool-run ids have the form every id of the framework has",
    ("systems/tool_turn.py", "agentloop._text"): "a tool's name is stored as all text is",
    ("systems/tool_turn.py", "agentloop._names"): "a streamed message's id has the form every id of the framework has",
    ("systems/input.py", "agentloop._text"): "the user's text is made storable by the rule every store relies on",
    ("systems/tool_loop.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/tool_turn.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/routing.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/context.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/compaction.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/budgets.py", "agentloop._log"): "the built-in systems log where the framework does",
    ("systems/nested.py", "agentloop._log"): "the built-in systems log where the framework does",
}
"""Internal helpers the built-in tool loop shares with the framework, each with its reason."""


@pytest.mark.parametrize("path", sources("systems"), ids=lambda p: str(p.relative_to(ROOT)))
def test_systems_import_only_public_agentloop_names(path: Path) -> None:
    where = str(path.relative_to(ROOT))
    bad = [
        (line, module)
        for line, module in imports(path)
        if module.split(".")[0] == "agentloop"
        and module not in PUBLIC_AGENTLOOP_MODULES
        and (where, module) not in SYSTEMS_INTERNAL_IMPORTS
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
    explains the SQLite backend, the tests about SQLite itself (its stores, its index
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


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    return ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)


LIBRARY = {module_name(path): path for package in ("agentloop", "systems") for path in sources(package)}


def module_level_imports(path: Path) -> Iterator[str]:
    """The modules `path` imports when it is loaded: top-level statements, not those inside a function
    or an `if TYPE_CHECKING:` block; `from package import module` counts as importing the module."""
    body = list(ast.parse(path.read_text(), str(path)).body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            body.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            body.extend(node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body])
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in LIBRARY)


def package_of(module: str) -> str:
    return module if LIBRARY[module].name == "__init__.py" else module.rpartition(".")[0]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            following = next((n for n in edges if n not in index or n in stack), None)
            if following is not None and following not in index:
                index[following] = low[following] = len(index)
                stack.append(following)
                work.append((following, iter(sorted(graph[following]))))
            elif following is not None:
                low[node] = min(low[node], index[following])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while (member := stack.pop()) != node:
                        component.append(member)
                    component.append(node)
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_joins_modules_of_different_packages() -> None:
    """A cycle inside one package is its own business; one across packages (the stores module and
    the PostgreSQL backend once imported each other) means neither can be read or loaded alone."""
    graph = {module: {target for target in module_level_imports(path) if target in LIBRARY and target != module} for module, path in LIBRARY.items()}
    crossing = [cycle for cycle in strongly_connected(graph) if len({package_of(module) for module in cycle}) > 1]
    assert crossing == [], f"import cycles across packages: {crossing}"


ADAPTER_GROUPS = ("llm", "embedders", "vectors", "channels")
"""Folders of adapters whose modules are each a provider of their own (`llm/openai.py`, `llm/anthropic.py`)."""
SHARED_ADAPTER_LAYERS = {"errors", "urls", "_private_files", "_rows", "stores", "metrics", "notes", "notifier", "llm.http", "usage", "_subjects", "audit", "retention"}
"""What every provider may build on: the adapters' errors, the URL rules, file modes, row helpers, the bundle
that opens a URL's backend, the HTTP layer the model providers share, the usage report keys and sums, the SQL of an erase's subject, the audit rows, and the
bundle that prunes a URL's backend."""
PROVIDER_DEPENDENCIES = {
    ("sqlite", "vectors.hnsw"): "the embedded backend keeps its vectors in hnswlib index files beside its database",
    ("sqlite", "vectors.scoped"): "the embedded backend's per-tenant graphs are scoped hnswlib indexes",
    ("vectors.scoped", "vectors.hnsw"): "a scoped index is a set of hnswlib indexes",
    ("sqlite", "embedders.hashing"): "vectors stored before the embedder was recorded were the hashing embedder's, named by it",
    ("postgres", "embedders.hashing"): "vectors stored before the embedder was recorded were the hashing embedder's, named by it",
}
"""The backends that are built on another provider, each with why."""


def provider_of(module: str) -> str | None:
    """`sqlite`, `postgres`, `llm.openai`, `embedders.hashing`, `mcp`...; None for a shared layer or a package."""
    parts = module.split(".")
    if parts[:2] != ["agentloop", "adapters"] or len(parts) < 3:
        return None
    provider = parts[2]
    if provider in ADAPTER_GROUPS:
        if len(parts) < 4:
            return None
        provider = f"{provider}.{parts[3]}"
    return None if provider in SHARED_ADAPTER_LAYERS else provider


@pytest.mark.parametrize("path", sources("agentloop/adapters"), ids=lambda p: str(p.relative_to(ROOT)))
def test_an_adapter_never_imports_another_providers_module(path: Path) -> None:
    """`anthropic_llm` once took `check_reachable` from `openai_llm`: a provider is read, changed and
    removed alone, and what two share lives in a shared layer."""
    own = provider_of(module_name(path))
    if own is None:
        return
    reached = {provider_of(module) for _, module in imports(path)} | {
        provider_of(f"{module}.{name}") for _, module, name in imported_names(path)
    }
    bad = sorted(p for p in reached if p is not None and p != own and (own, p) not in PROVIDER_DEPENDENCIES)
    assert bad == [], f"{path.relative_to(ROOT)} ({own}) imports the provider(s) {bad}; move what they share to a shared layer"


BACKEND_MODULES = re.compile(r"^(sqlite3|psycopg|psycopg_pool|procrastinate|pgvector|pgserver)(\.|$)")
BACKEND_CLASSES = re.compile(r"^(Sqlite|Postgres)[A-Z]\w*$")
BACKEND_NAME_EXCEPTIONS = {
    "agentloop/adapters/__init__.py": "the adapters' public surface re-exports the embedded backend's store classes",
    "agentloop/workers/inbox.py": "the durable inbox is PostgreSQL-only by design (procrastinate jobs, advisory locks)",
    "agentloop/workers/worker.py": "the workers run procrastinate's worker over the PostgreSQL inbox",
    "agentloop/bots.py": "opening a bot says 'cannot open the bot' in one line when a SQLite file is not a database (sqlite3.Error)",
    "agentloop/cli/chat.py": "as bots.py, for the user's own pipeline opened on the bot's stores",
    "agentloop/cli/stores.py": "as bots.py, for `stores reembed`",
}
"""Library modules outside `adapters/sqlite/` and `adapters/postgres/` that name a backend, each with why."""


def backend_names(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if BACKEND_MODULES.match(alias.name)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} if BACKEND_MODULES.match(node.module) else set()
            found |= {alias.name for alias in node.names if BACKEND_CLASSES.match(alias.name)}
        elif isinstance(node, ast.Name) and BACKEND_CLASSES.match(node.id):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and BACKEND_CLASSES.match(node.attr):
            found.add(node.attr)
        elif isinstance(node, ast.ClassDef) and BACKEND_CLASSES.match(node.name):
            found.add(node.name)
    return found


@pytest.mark.parametrize("path", sources("agentloop") + sources("systems"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sqlite_or_postgresql_name_outside_its_adapter_package(path: Path) -> None:
    """A third backend is a new folder under adapters/, not edits across the library."""
    relative = str(path.relative_to(ROOT))
    if relative.startswith(("agentloop/adapters/sqlite/", "agentloop/adapters/postgres/")) or relative in BACKEND_NAME_EXCEPTIONS:
        return
    assert backend_names(path) == set(), f"{relative} names a storage backend; go through agentloop.adapters.open_stores and the ports"


def test_every_backend_name_exception_is_still_needed() -> None:
    unused = [relative for relative in BACKEND_NAME_EXCEPTIONS if not backend_names(ROOT / relative)]
    assert unused == [], f"these modules no longer name a backend; drop them from BACKEND_NAME_EXCEPTIONS: {unused}"


def test_every_public_error_subclasses_agentloop_error() -> None:
    """One `except AgentloopError` catches whatever the library raises on purpose (the CLI's single handler)."""
    import importlib

    from agentloop.errors import AgentloopError

    strays = sorted(
        f"{module}.{name}"
        for module in LIBRARY
        if not module.split(".")[-1].startswith("_") and not module.startswith("agentloop.examples")
        for name, value in vars(importlib.import_module(module)).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module
        and not name.startswith("_") and not issubclass(value, (AgentloopError, Warning))
    )
    assert strays == [], f"public exceptions outside the AgentloopError tree: {strays}"


def test_no_library_code_rewraps_an_error_as_a_cli_error_by_its_text() -> None:
    """The code that fails raises an `AgentloopError`, which `main`'s one handler prints; the CLI once
    turned a ValueError, a FileNotFoundError and a BotError into a `CliError` one by one."""
    rewraps = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources("agentloop") + sources("systems")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "CliError(str(" in line
    ]
    assert rewraps == [], f"raise an AgentloopError where the error happens instead: {rewraps}"


def _company_literals(path: Path) -> Iterator[int]:
    """Lines where `path` gives a parameter or a field the literal company id "default"."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        values = (
            [*node.defaults, *(d for d in node.kw_defaults if d is not None)] if isinstance(node, ast.arguments)
            else [node.value] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        )
        yield from (value.lineno for value in values if isinstance(value, ast.Constant) and value.value == "default")


def test_the_default_company_is_named_by_its_constant() -> None:
    """Note-taking once wrote "default" where `DEFAULT_COMPANY` exists: one rule written twice can drift."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources("agentloop") + sources("systems")
        if path != ROOT / "agentloop" / "scopes.py"
        for line in _company_literals(path)
    ]
    assert found == [], f"use agentloop.scopes.DEFAULT_COMPANY: {found}"


TREE_FOLDER = re.compile(r"^\s*([\w.]+)/")


def architecture_tree() -> list[str]:
    """The lines of the package tree that opens docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"^## Layers and packages\n.*?^```\n(.*?)^```", text, re.S | re.M)
    assert found, "docs/architecture.md has no package tree under '## Layers and packages'"
    return [line for line in found.group(1).splitlines() if line.strip()]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entry(lines: list[str], start: int) -> list[str]:
    """The line `start` and the lines under it (deeper indented)."""
    end = start + 1
    while end < len(lines) and _indent(lines[end]) > _indent(lines[start]):
        end += 1
    return lines[start:end]


def _own_text(entry: list[str]) -> str:
    """An entry's text without the entries of the folders under it."""
    own, skip_below = [], None
    for line in entry[1:]:
        if skip_below is not None and _indent(line) > skip_below:
            continue
        skip_below = _indent(line) if TREE_FOLDER.match(line) else None
        if skip_below is None:
            own.append(line)
    return "\n".join([entry[0], *own])


def folder_text(tree: list[str], parts: tuple[str, ...]) -> str | None:
    """What the tree says in a folder's entry (`('adapters', 'sqlite')`); a folder named only inside
    its parent's entry (`telegram/`) shares the parent's text; None when the tree leaves it out."""
    entry = tree
    text = None
    for part in parts:
        starts = [i for i, line in enumerate(entry) if (m := TREE_FOLDER.match(line)) and m.group(1) == part]
        if starts:
            entry = _entry(entry, starts[0])
            text = _own_text(entry)
        elif text is None or not re.search(rf"(?<![\w/]){re.escape(part)}/", text):
            return None
    return text


def test_every_module_of_agentloop_is_named_in_the_architecture_pages_tree() -> None:
    """The tree once left out a dozen modules (`budgets`, `tokens`, `adapters/audit.py`...): a contributor
    reads it to find where a thing lives, so each module is named under its folder, with what it holds."""
    tree = architecture_tree()
    missing = set()
    for path in sources("agentloop"):
        parts = path.relative_to(ROOT).parts
        text = folder_text(tree, parts[:-1])
        if text is None:
            missing.add("/".join(parts[:-1]) + "/")
        elif path.stem != "__init__" and not re.search(rf"(?<![\w.]){re.escape(path.stem)}(?:\.py)?(?!\w)", text):
            missing.add("/".join(parts))
    assert sorted(missing) == [], f"name these in docs/architecture.md's tree, under their folder: {sorted(missing)}"


MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize(
    "path", sources("agentloop") + sources("systems") + sources("benchmarks") + sources("examples"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_library_file_is_over_600_lines_nor_any_function_over_60(path: Path) -> None:
    """A file is one concern a reader can hold; a function one step a reader can follow. The benchmarks
    and examples are read as much as the library, so the same limits hold for them."""
    text = path.read_text()
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert text.count("\n") <= MAX_FILE_LINES and long == [], f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines; long functions: {long}"
