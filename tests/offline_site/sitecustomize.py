"""Puts the tests' network guard (tests/network_guard.py) on a Python process the tests
start, then runs the `sitecustomize` this one shadows, if there is one."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def _run(spec: importlib.machinery.ModuleSpec | None) -> object:
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HERE = Path(__file__).resolve().parent
_run(importlib.util.spec_from_file_location("agentloop_tests_network_guard", _HERE.parent / "network_guard.py")).install()  # type: ignore[attr-defined]
_shadowed = importlib.machinery.PathFinder.find_spec("sitecustomize", [p for p in sys.path if Path(p or ".").resolve() != _HERE])
if _shadowed is not None:
    _run(_shadowed)
