"""The public surface: each public package declares its names once, in one sorted `__all__`, and
importing agentloop leaves the process's logging as it found it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

PUBLIC_PACKAGES = [
    "agentloop",
    "agentloop.adapters",
    "agentloop.adapters.postgres",
    "agentloop.adapters.sqlite",
    "agentloop.agents",
    "agentloop.cli",
    "agentloop.notes",
    "agentloop.ports",
    "agentloop.serve",
    "agentloop.tasks",
    "agentloop.testing",
    "agentloop.testing.stores",
    "agentloop.workers",
    "systems",
]
PUBLIC_MODULES = ["agentloop.budgets", "agentloop.compaction", "agentloop.tokens"]
"""Modules users import by their own path (the systems' token budgets and counting), not packages."""


def isort_order(name: str) -> tuple[int, str]:
    """Constants first, then classes, then functions: how ruff's RUF022 sorts an `__all__`."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES + PUBLIC_MODULES)
def test_each_public_package_declares_one_sorted_all_without_duplicates(package: str) -> None:
    names = list(importlib.import_module(package).__all__)
    assert len(names) == len(set(names)), f"{package}.__all__ repeats {sorted({n for n in names if names.count(n) > 1})}"
    assert names == sorted(names, key=isort_order), f"{package}.__all__ is not sorted"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES + PUBLIC_MODULES)
def test_every_name_in_a_public_all_imports_without_a_deprecation(package: str) -> None:
    module = importlib.import_module(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []


@pytest.mark.parametrize("name", ["cap_bytes", "new_id", "passes_through", "running_task", "storable"])
def test_a_helper_that_left_the_public_surface_still_imports_with_a_deprecation_warning(name: str) -> None:
    import agentloop

    with pytest.warns(DeprecationWarning, match=f"agentloop.{name} is an internal helper"):
        helper = getattr(agentloop, name)
    assert callable(helper) and name not in agentloop.__all__


def test_from_agentloop_import_storable_and_new_id_still_works_with_a_deprecation_warning() -> None:
    """They were in `agentloop.__all__` although they are helpers, not API; code that imported them keeps running."""
    with pytest.warns(DeprecationWarning, match="agentloop.storable is an internal helper"):
        from agentloop import storable
    with pytest.warns(DeprecationWarning, match="agentloop.new_id is an internal helper"):
        from agentloop import new_id
    assert storable("a\x00b") == "a\ufffdb" and len(new_id()) > 0


def test_each_public_module_declares_every_public_name_it_defines() -> None:
    """`agentloop.compaction` and `agentloop.tokens` had no `__all__`, so a reader could not tell API from helper."""
    undeclared = {}
    for module in PUBLIC_MODULES:
        imported = importlib.import_module(module)
        tree = ast.parse(Path(str(imported.__file__)).read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        defined |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
        defined |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
        undeclared[module] = sorted(name for name in defined if not name.startswith("_") and name not in imported.__all__)
    assert undeclared == {module: [] for module in PUBLIC_MODULES}


def test_importing_agentloop_configures_neither_structlog_nor_the_root_logger() -> None:
    script = (
        "import logging, structlog\n"
        "import agentloop, agentloop.adapters, agentloop.testing, systems\n"
        "print(structlog.is_configured(), logging.getLogger().handlers)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == "False []\n"


def test_each_public_package_imports_first_in_a_fresh_interpreter() -> None:
    """Late imports once hid import cycles that depend on which package is imported first."""
    script = (
        "import importlib, sys\n"
        "package = sys.argv[1]\n"
        "module = importlib.import_module(package)\n"
        "[getattr(module, name) for name in module.__all__]\n"
    )
    failed = {}
    for package in PUBLIC_PACKAGES:
        result = subprocess.run([sys.executable, "-c", script, package], capture_output=True, text=True)
        if result.returncode != 0:
            failed[package] = result.stderr.strip().splitlines()[-1]
    assert failed == {}
