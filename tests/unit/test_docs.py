"""The guides in docs/ are executed: their Python runs, their files are the example project.

In a guide, a fenced block with a title (```python title="welcome_bot.py") is a file the
reader saves; every other ```python block is code the reader runs. Each guide runs in a
fresh temporary directory holding its files, its code blocks in order in one namespace;
a ```text title="output" block must appear in what that code printed. A ```console
block is a terminal session: each `$ agentloop ...` line runs the command line of this
checkout (as the installed script would, `NAME=value` prefixes set the environment), the
lines after it must appear in its output, and `$ echo $?` shows its exit
status (otherwise it must be 0). ```bash blocks are not run.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

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
    logging_config = structlog.get_config()
    namespace: dict[str, object] = {"__name__": f"docs_{guide.stem}"}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            for index, block in enumerate(found):
                if block.lang == "python" and not block.is_file:
                    exec(compile(block.text, f"{guide.name} code block {index + 1}", "exec"), namespace)
                elif block.lang == "console":
                    run_console(block.text, directory)
    finally:
        structlog.configure(**logging_config)
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
