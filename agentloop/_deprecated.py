"""Old public names and module paths kept working for a while: a module `__getattr__` that answers
each old name with the new object (`renamed_names`), or each name of a module that became internal
from its old path (`moved_module`), with a DeprecationWarning saying what to change."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping


def renamed_names(
    module: str, renamed: Mapping[str, str], internal: Mapping[str, str] | None = None
) -> Callable[[str], object]:
    """A `__getattr__` for `module` serving each old name in `renamed` (old name -> the new
    dotted path, e.g. `"agentloop.LlmFailure"`) and each helper in `internal` that is no longer
    public (name -> the internal dotted path it now lives at); any other name is an AttributeError."""
    hidden = internal or {}

    def __getattr__(name: str) -> object:
        if name in renamed:
            new = renamed[name]
            message = f"{module}.{name} is deprecated; use {new}"
        elif name in hidden:
            new = hidden[name]
            message = f"{module}.{name} is an internal helper, not public API, and will be removed; copy it if you need it"
        else:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        path, _, attribute = new.rpartition(".")
        return getattr(importlib.import_module(path), attribute)

    return __getattr__


def moved_module(module: str, new: str) -> Callable[[str], object]:
    """A `__getattr__` for the old path `module` of a module that became the internal `new`: each
    name is `new`'s, with a DeprecationWarning, so code written against the old path keeps running."""

    def __getattr__(name: str) -> object:
        moved = importlib.import_module(new)
        if name == "__all__":  # `from <old path> import *`: the names the module had
            value: object = getattr(moved, "__all__", [public for public in vars(moved) if not public.startswith("_")])
        elif name.startswith("__") or not hasattr(moved, name):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        else:
            value = getattr(moved, name)
        warnings.warn(
            f"{module} is internal now ({new}), not public API, and this path will be removed; copy "
            f"{'what you use' if name == '__all__' else name} if you need it",
            DeprecationWarning, stacklevel=2,
        )
        return value

    return __getattr__
