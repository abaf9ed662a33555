"""The guides in docs/ are executed: their Python runs, their files are the example project.

In a guide, a fenced block with a title (```python title="welcome_bot.py") is a file the
reader saves; every other ```python block is code the reader runs. Each guide runs in a
fresh temporary directory holding its files, its code blocks in order in one namespace;
a ```text title="output" block must appear in what that code printed. A ```console
block is a terminal session: each `$ agentloop ...` line runs the command line of this
checkout (as the installed script would, `NAME=value` prefixes set the environment), the
lines after it must appear in its output, and `$ echo $?` shows its exit
status (otherwise it must be 0). ```bash blocks are not run. A block may `await` at its
top level, as in `python -m asyncio`.

README.md runs the same way, every ```python block in order in one namespace, with the model
and the terminal swapped for the test kit's scripted ones (a block that builds
`OpenAICompatibleLLM` or `ConsoleChannel` gets `ScriptedLLM` and `RecordingChannel`), in a
directory holding the task guide's templates. A ```python block in docs/adr/ records the
shape a decision gave the code: it is compiled, and each class it sketches must exist with
every field and method it names; it is not run.

The prose is checked too: every backticked code name in README.md and docs/ must still
exist in agentloop or systems, and nothing in the repo cites documents outside it.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import functools
import importlib
import inspect
import io
import itertools
import os
import pkgutil
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import attrs

import pytest
import structlog

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLE = ROOT / "tests" / "example_project"
_FENCE = re.compile(r'^```(?P<lang>[\w-]*)(?:[ \t]+title="(?P<title>[^"]+)")?[ \t]*\n(?P<text>.*?)^```[ \t]*$', re.M | re.S)


class Block(NamedTuple):
    lang: str
    title: str | None
    text: str

    @property
    def is_file(self) -> bool:
        return self.title is not None and self.title != "output"


def blocks(guide: Path) -> list[Block]:
    return [Block(m["lang"], m["title"], m["text"]) for m in _FENCE.finditer(guide.read_text())]


def run_console(session: str, directory: Path) -> None:
    """Run each `$ agentloop ...` command of a console block and check what it shows."""
    steps: list[tuple[str, list[str]]] = []
    for line in session.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:].strip(), []))
        elif steps:
            steps[-1][1].append(line.rstrip())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    status: int | None = None
    for index, (command, shown) in enumerate(steps):
        if command == "echo $?":
            assert shown == [str(status)], f"`{steps[index - 1][0]}` exited with {status}, the guide shows {shown}"
            continue
        argv = shlex.split(command)
        variables = dict(arg.split("=", 1) for arg in itertools.takewhile(lambda a: "=" in a, argv))
        argv = argv[len(variables) :]
        assert argv[0] == "agentloop", f"a console block runs only agentloop commands, not {command!r}"
        run_env = {**env, **variables}
        if "PYTHONPATH" in variables:
            run_env["PYTHONPATH"] = os.pathsep.join([variables["PYTHONPATH"], env["PYTHONPATH"]])
        result = subprocess.run(  # as the console script runs: the current directory is not on sys.path
            [sys.executable, "-c", "import sys; sys.path.pop(0); from agentloop.cli import main; sys.exit(main())", *argv[1:]],
            cwd=directory, env=run_env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
        )
        output = result.stdout + result.stderr
        for line in shown:
            if line.strip() and line.strip() != "...":
                assert line in output, f"`{command}` does not print {line!r}; it printed:\n{output}"
        status = result.returncode
        checked = index + 1 < len(steps) and steps[index + 1][0] == "echo $?"
        assert checked or status == 0, f"`{command}` exited with {status}:\n{output}"


def run_python(text: str, name: str, namespace: dict[str, object]) -> None:
    """Run a code block in `namespace`; one that awaits at its top level runs in an event loop of its own."""
    code = compile(text, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


def run_guide(guide: Path, directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Save the guide's files in `directory`, run its code blocks there; what they printed."""
    found = blocks(guide)
    modules = []
    for block in found:
        if block.is_file:
            assert block.title is not None
            path = directory / block.title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
            if path.suffix == ".py":
                modules.append(path.stem)
    monkeypatch.chdir(directory)
    monkeypatch.syspath_prepend(str(directory))
    for module in modules:  # the guide's own file, not a same-named module imported earlier
        monkeypatch.delitem(sys.modules, module, raising=False)
    logging_config, configured = structlog.get_config(), structlog.is_configured()
    structlog.reset_defaults()  # a guide runs as in a fresh program, whatever an earlier test configured
    namespace: dict[str, object] = {"__name__": f"docs_{guide.stem}"}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            for index, block in enumerate(found):
                if block.lang == "python" and not block.is_file:
                    run_python(block.text, f"{guide.name} code block {index + 1}", namespace)
                elif block.lang == "console":
                    run_console(block.text, directory)
    finally:  # the next test finds logging as this one did
        if configured:
            structlog.configure(**logging_config)
        else:
            structlog.reset_defaults()
        for module in modules:
            sys.modules.pop(module, None)
    return printed.getvalue()


GUIDES = sorted(p for p in DOCS.glob("*.md") if any(b.lang in ("python", "console") for b in blocks(p)))


@pytest.mark.parametrize("guide", GUIDES, ids=[p.name for p in GUIDES])
def test_the_guide_runs_and_prints_what_it_shows(guide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = run_guide(guide, tmp_path, monkeypatch)
    for block in blocks(guide):
        if block.title == "output":
            assert block.text.strip() in printed, f"{guide.name} shows output its code does not print:\n{printed}"


def test_every_python_block_of_the_readme_runs_with_the_scripted_model_and_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the README's first block ran once (as the example module): the tasks, the standard
    pipeline on an OpenAI-compatible server and note-taking were never executed."""
    import agentloop.adapters
    import agentloop.adapters.llm.openai
    from agentloop.testing import RecordingChannel, ScriptedLLM

    for block in blocks(DOCS / "tasks.md"):
        if block.is_file and block.title is not None and block.title.startswith("templates/"):
            (tmp_path / block.title).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.title).write_text(block.text)
    built: list[ScriptedLLM] = []

    def scripted(base_url: str, model: str, **_: object) -> ScriptedLLM:
        built.append(ScriptedLLM(["It is sunny in Lisbon."], model=model))
        return built[-1]

    monkeypatch.setattr(agentloop.adapters.llm.openai, "OpenAICompatibleLLM", scripted)
    monkeypatch.setattr(agentloop.adapters, "ConsoleChannel", RecordingChannel)
    python = [block for block in blocks(ROOT / "README.md") if block.lang == "python"]
    printed = run_guide(ROOT / "README.md", tmp_path, monkeypatch)
    assert len(python) == 4 and "Hello, Ada!" in printed and "done: Write the report" in printed
    assert [llm.model for llm in built] == ["llama3.1"] and (tmp_path / "data").is_dir()


ADRS = sorted(p for p in (DOCS / "adr").glob("*.md") if any(b.lang == "python" for b in blocks(p)))


@pytest.mark.parametrize("adr", ADRS, ids=[p.name for p in ADRS])
def test_each_class_an_adr_sketches_exists_with_the_fields_and_methods_it_names(adr: Path) -> None:
    """An ADR's code is a record of shapes, not a program: it compiles, and what it names still exists."""
    missing = []
    for index, block in enumerate(b for b in blocks(adr) if b.lang == "python"):
        tree = compile(block.text, f"{adr.name} code block {index + 1}", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
            elif isinstance(node, ast.ClassDef):
                classes = [value for value in _code().names.get(node.name, ()) if isinstance(value, type)]
                named = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                named |= {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                if not any(named <= _members(cls) for cls in classes):
                    missing.append(f"{node.name} with {sorted(named)}")
    assert missing == [], f"{adr.name} sketches what the code no longer has: {missing}"


def test_the_tutorial_runs_twice_in_the_same_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader who ran the tutorial's code again got a bare AssertionError: its bot kept the
    first run's history in ./data, so the second run's first answer had no welcome."""
    run_guide(DOCS / "tutorial.md", tmp_path, monkeypatch)
    printed = run_guide(DOCS / "tutorial.md", tmp_path, monkeypatch)
    assert "WelcomeSystem" in printed and not (tmp_path / "data").exists()


def test_the_tutorial_and_the_example_project_are_one_text() -> None:
    """What the tutorial tells a reader to save is the test project pytest runs, and all of it."""
    files = {b.title: b.text for b in blocks(DOCS / "tutorial.md") if b.is_file}
    project = {p.name: p.read_text() for p in EXAMPLE.iterdir() if p.suffix in (".py", ".feature")}
    assert files == project


def test_the_example_project_uses_only_public_imports() -> None:
    """A user's project reaches agentloop through its public modules and the BDD steps only."""
    public = {"agentloop", "agentloop.testing", "agentloop.testing.bdd", "systems"}
    for path in EXAMPLE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("agentloop", "systems"):
                    assert name in public, f"{path.name} imports {name}, which a user should not need"


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", page.read_text()):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_the_tutorial_is_among_the_executed_guides() -> None:
    assert DOCS / "tutorial.md" in GUIDES


def test_every_test_and_scenario_a_guide_cites_exists() -> None:
    """The guides point at the tests that check each claim; those tests must exist."""
    sources = {p.name: p.read_text() for p in (ROOT / "tests").rglob("test_*.py")}
    scenarios = set(re.findall(r"^\s*Scenario(?: Outline)?: (.+?)\s*$", "".join(
        p.read_text() for p in (ROOT / "tests").rglob("*.feature")), re.M))
    cited = 0
    for guide in DOCS.glob("*.md"):
        text = guide.read_text()
        for file, test in re.findall(r"(test_\w+\.py)::((?:test_|Test)\w+)", text):
            source = sources.get(file, "")
            assert f"def {test}(" in source or f"{test} =" in source, f"{guide.name} cites {file}::{test}, which does not exist"
            cited += 1
        for line in text.splitlines():
            for tail in re.findall(r"scenarios? (.*)", line):
                for title in re.findall(r'"([^"]+)"', tail.split("|")[0]):
                    assert title in scenarios, f"{guide.name} cites the scenario {title!r}, which does not exist"
                    cited += 1
    assert cited > 0


def test_the_tutorials_project_passes_on_its_own(tmp_path: Path) -> None:
    """Saved in an empty directory, as a reader would, the tutorial's files make a passing test suite."""
    expected = 0
    for block in blocks(DOCS / "tutorial.md"):
        if block.is_file:
            assert block.title is not None
            (tmp_path / block.title).write_text(block.text)
            expected += len(re.findall(r"^\s*Scenario:|^def test_", block.text, re.M))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0 and f"{expected} passed" in result.stdout, result.stdout + result.stderr


PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
_CITATION = re.compile(r"\bDESIGN\b|(?i:\bseeds?\s+\d{3}\b|\bthe seeds?\b)")


def test_nothing_cites_documents_that_are_not_in_the_repo() -> None:
    """The repo stands on its own: no doc, docstring, comment or test cites the design
    document or the source briefs by name; each states the rule itself."""
    found = []
    for top in ("README.md", "docs", "agentloop", "systems", "tests", "benchmarks"):
        paths = [ROOT / top] if top.endswith(".md") else sorted((ROOT / top).rglob("*"))
        for path in paths:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if _CITATION.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "say the rule instead of where it came from:\n" + "\n".join(found)


NOT_CODE_NAMES = frozenset({"LLM_RESPONSE", "RESPONSE_SENT"})
"""Backticked words that look like code names and are not ours: the string keys of the
reference bot that ADR 0001 replaced."""

_FILE_NAME = re.compile(r"\.(?:py|md|feature|xml|rng|toml|json|sqlite3|txt|ini|cfg|ya?ml)$")
_METRIC_NAME = re.compile(r"note_taking(?:\.[a-z_]+){2}|gen_ai(?:\.[a-z_]+)+")
_CALL = "\0"


class _Code(NamedTuple):
    """Every module of agentloop and systems, the names they define, and every attribute
    name of their classes (what `variable.attr` in a doc may refer to)."""

    modules: dict[str, ModuleType]
    names: dict[str, list[object]]
    members: frozenset[str]


def _members(cls: type) -> set[str]:
    """The attributes an instance of `cls` has: class attributes, attrs fields, annotations."""
    found = set(dir(cls))
    if attrs.has(cls):
        found.update(attrs.fields_dict(cls))
    for base in cls.__mro__:
        found.update(getattr(base, "__annotations__", {}))
    return found


@functools.cache
def _code() -> _Code:
    modules: dict[str, ModuleType] = {}
    for package in ("agentloop", "systems"):
        root = importlib.import_module(package)
        modules[package] = root
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if not info.name.startswith("agentloop.examples."):  # scripts: importing one runs it
                modules[info.name] = importlib.import_module(info.name)
    names: dict[str, list[object]] = {}
    for module in modules.values():
        for name, value in vars(module).items():
            names.setdefault(name, []).append(value)
    classes = {value for values in names.values() for value in values if isinstance(value, type)}
    return _Code(modules, names, frozenset(itertools.chain.from_iterable(_members(c) for c in classes)))


def _defined_in(page: Path) -> set[str]:
    """The names a page's own code blocks define or import (a reader's `GreetingSystem`)."""
    defined: set[str] = set()
    for block in blocks(page):
        if block.lang != "python":
            continue
        tree = compile(block.text, page.name, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return defined


def code_name(span: str) -> list[tuple[str, bool]] | None:
    """`span` as dotted segments, each with whether it is called, when it reads as a name
    of our code (`Class.attr`, `agentloop.x.y`, `func()`, `var.method(...)`); else None."""
    text = span.strip()
    if text in NOT_CODE_NAMES or _METRIC_NAME.fullmatch(text):
        return None
    while (reduced := re.sub(r"\([^()]*\)", _CALL, text)) != text:
        text = reduced
    text = re.sub(r"\s*->.*$", "", text)
    if _FILE_NAME.search(text) or not re.fullmatch(r"[A-Za-z_]\w*\0?(?:\.[A-Za-z_]\w*\0?)*", text):
        return None
    segments = [(part.rstrip(_CALL), part.endswith(_CALL)) for part in text.split(".")]
    first = segments[0][0]
    if first in ("agentloop", "systems") or first[0].isupper() or any(called for _, called in segments):
        return segments
    return segments if len(segments) > 1 else None


def _walk(start: object, rest: list[tuple[str, bool]], code: _Code) -> bool:
    """Whether each segment is an attribute of what the previous one named; after a call,
    of some class of ours."""
    current: object | None = start
    for name, called in rest:
        if current is None:
            if name not in code.members:
                return False
        elif hasattr(current, name):
            current = getattr(current, name)
        elif isinstance(current, type) and name in _members(current):
            current = None
        else:
            return False
        if called:
            current = None
    return True


def resolves(segments: list[tuple[str, bool]], defined: set[str]) -> bool:
    """Whether the cited name exists: defined by the page itself, a builtin, or in our code."""
    code = _code()
    first, rest = segments[0][0], segments[1:]
    if first in defined or hasattr(builtins, first):
        return True
    if first in ("agentloop", "systems"):
        dotted = [name for name, _ in segments]
        for length in range(len(dotted), 0, -1):
            module = code.modules.get(".".join(dotted[:length]))
            if module is not None:
                return _walk(module, segments[length:], code)
    if any(_walk(None if segments[0][1] else value, rest, code) for value in code.names.get(first, ())):
        return True
    if first[0].islower() or first.isupper():  # a variable's attribute, or a bare method or enum member
        return all(name in code.members for name, _ in (rest or segments))
    return False


def cited_names(page: Path) -> Iterator[tuple[int, str, list[tuple[str, bool]]]]:
    """(line, span, segments) for each backticked code name in the prose of `page`."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text())
    for number, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`\n]+)`", line):
            segments = code_name(span)
            if segments is not None:
                yield number, span, segments


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_name_a_page_cites_exists(page: Path) -> None:
    """A renamed class, method or function fails the docs that still cite the old name."""
    defined = _defined_in(page)
    missing = [
        f"{page.relative_to(ROOT)}:{number}: `{span}`"
        for number, span, segments in cited_names(page)
        if not resolves(segments, defined)
    ]
    assert missing == [], "these names are not in agentloop or systems:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("span", "exists"),
    [
        ("LayerIds.visible_owners", True), ("LayerIds.sees", False), ("agentloop.knowledge_scope", True),
        ("agentloop.no_such_name", False), ("systems.standard", True), ("TaskTurn.render()", True),
        ("OutgoingResponse.voice_text", True), ("DistillationStatus.SKIPPED", True), ("NoSuchClass", False),
        ("ctx.get(T) -> T | None", True), ("ctx.no_such_method(T)", False), ("no_such_function()", False),
        ("standard_pipeline(...).build(inputs=(TaskTurn,))", True), ("pipeline.describe().no_such_method()", False),
    ],
)
def test_a_cited_code_name_is_checked_against_the_code(span: str, exists: bool) -> None:
    segments = code_name(span)
    assert segments is not None and resolves(segments, set()) is exists


@pytest.mark.parametrize(
    "span", ["welcome_bot.py", "--data-dir", "llama3.1", "note_taking.retrieval.latency_ms", "fresh_context=enabled",
             "agentloop notes list", "LLM_RESPONSE", "assistant_text", "<data_dir>/<bot>.sqlite3"],
)
def test_file_names_flags_metrics_settings_and_commands_are_not_code_names(span: str) -> None:
    assert code_name(span) is None
