"""Old public names kept working for a while: a module `__getattr__` that answers each with the
new class and a DeprecationWarning naming it, so an upgrade breaks nothing and says what to change."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping


def renamed_names(module: str, renamed: Mapping[str, str]) -> Callable[[str], object]:
    """A `__getattr__` for `module` serving each old name in `renamed` (old name -> the new
    dotted path, e.g. `"agentloop.LlmFailure"`); any other name is an AttributeError as usual."""

    def __getattr__(name: str) -> object:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
        path, _, attribute = new.rpartition(".")
        return getattr(importlib.import_module(path), attribute)

    return __getattr__
