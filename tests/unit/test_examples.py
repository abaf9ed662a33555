"""The README's example is the shipped example module, and it runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> str:
    readme = (ROOT / "README.md").read_text()
    match = re.search(rf"## {heading}\n\n```(?:python|bash)\n(.*?)```", readme, re.S)
    assert match, f"README has no code block under '## {heading}'"
    return match.group(1)


def test_readme_bot_is_the_example_module() -> None:
    module = (ROOT / "agentloop" / "examples" / "greeting.py").read_text()
    assert module.endswith(readme_block("A bot in twenty lines"))


def test_example_bot_answers() -> None:
    result = subprocess.run([sys.executable, "-m", "agentloop.examples.greeting"], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert lines[-1] == "Hello, Ada!"
    assert any(line.split() == ["10", "GreetingSystem", "-", "Greeting"] for line in lines)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = readme_block("Run the tests").strip()
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_first_command_installs_and_runs_the_demo() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert first and first.group(1).strip() == "pip install -e . && agentloop demo"
