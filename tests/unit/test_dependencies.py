"""The floors pyproject.toml states for the core dependencies are the real ones: none is
lower than a core dependency held to one release series requires of it, so an install at
the stated floor works."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _floor(requirement: Requirement) -> Version | None:
    """The lowest version `requirement` allows, where it states one."""
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "~=", "==", ">")]
    return max(floors, default=None)


def test_no_core_floor_is_below_what_a_core_dependency_held_to_one_series_requires_of_it() -> None:
    """A dependency with an upper bound (the default embedder's `wordllama`) is held to the
    installed series, so what the installed one requires is what every allowed one does."""
    core = [Requirement(spec) for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    ours = {canonicalize_name(r.name): _floor(r) for r in core}
    held = [r for r in core if any(spec.operator == "<" for spec in r.specifier)]
    assert "wordllama" in {canonicalize_name(r.name) for r in held}
    too_low = []
    for dependency in held:
        for spec in importlib.metadata.requires(dependency.name) or []:
            needed = Requirement(spec)
            name = canonicalize_name(needed.name)
            if name not in ours or (needed.marker is not None and not needed.marker.evaluate({"extra": ""})):
                continue
            floor, their_floor = ours[name], _floor(needed)
            if their_floor is not None and (floor is None or floor < their_floor):
                too_low.append(f"{name}>={floor} while {dependency.name} needs {needed.specifier}")
    assert too_low == []
