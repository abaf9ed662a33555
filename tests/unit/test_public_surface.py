"""The public surface: each public package declares its names once, in one sorted `__all__`, and
importing agentloop leaves the process's logging as it found it."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

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


def isort_order(name: str) -> tuple[int, str]:
    """Constants first, then classes, then functions: how ruff's RUF022 sorts an `__all__`."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_each_public_package_declares_one_sorted_all_without_duplicates(package: str) -> None:
    names = list(importlib.import_module(package).__all__)
    assert len(names) == len(set(names)), f"{package}.__all__ repeats {sorted({n for n in names if names.count(n) > 1})}"
    assert names == sorted(names, key=isort_order), f"{package}.__all__ is not sorted"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_name_in_a_public_all_imports_without_a_deprecation(package: str) -> None:
    module = importlib.import_module(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []


@pytest.mark.parametrize("name", ["cap_bytes", "passes_through", "running_task"])
def test_a_helper_that_left_the_public_surface_still_imports_with_a_deprecation_warning(name: str) -> None:
    import agentloop

    with pytest.warns(DeprecationWarning, match=f"agentloop.{name} is an internal helper"):
        helper = getattr(agentloop, name)
    assert callable(helper) and name not in agentloop.__all__


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
