"""The `agentloop` command line."""

from __future__ import annotations

import io
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from agentloop.cli import main

FACTORIES = textwrap.dedent(
    """
    import attrs
    from agentloop import AgentContext, AgentLoop, System

    @attrs.frozen
    class Draft:
        text: str

    class Drafter(System):
        order, writes = 10, (Draft,)
        def process(self, ctx: AgentContext) -> None: ...

    class Reviewer(System):
        order, reads = 20, (Draft,)
        def process(self, ctx: AgentContext) -> None: ...

    def as_list():
        return [Reviewer(), Drafter()]

    def as_loop():
        return AgentLoop(as_list())

    class Builder:
        def build(self):
            return as_loop()

    def as_builder():
        return Builder()

    def broken():
        Reviewer.order = 5
        Drafter.order = 10
        return [Reviewer(), Drafter()]

    def wrong():
        return 42
    """
)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_bot_pipeline.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_bot_pipeline"


@pytest.mark.parametrize("factory", ["as_list", "as_loop", "as_builder"])
def test_pipeline_show_prints_the_ordered_table(user_module: str, factory: str) -> None:
    out = io.StringIO()
    assert main(["pipeline", "show", f"{user_module}:{factory}"], out) == 0
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert rows[2] == ["10", "Drafter", "-", "Draft"] and rows[3] == ["20", "Reviewer", "Draft", "-"]


def test_pipeline_show_mermaid(user_module: str) -> None:
    out = io.StringIO()
    assert main(["pipeline", "show", "--mermaid", f"{user_module}:as_list"], out) == 0
    assert out.getvalue().splitlines()[0] == "flowchart TD"
    assert "    s0 -. Draft .-> s1" in out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "expected MODULE:FACTORY"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("{m}:missing", "has no callable 'missing'"),
        ("{m}:wrong", "returned int"),
        ("{m}:broken", "does not build: Reviewer (order 5) reads Draft"),
    ],
)
def test_pipeline_show_explains_bad_targets(
    user_module: str, target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pipeline", "show", target.format(m=user_module)], io.StringIO()) == 1
    assert message in capsys.readouterr().err


def test_the_console_script_is_installed() -> None:
    script = shutil.which("agentloop")
    assert script is not None, "pip install -e . should put `agentloop` on PATH"
    result = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    assert "pipeline" in result.stdout


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and "COMMAND" in capsys.readouterr().err
