"""Reading the TOML files commands are given (`--tokens`, `--chats`): one way to say why a file
cannot be used, worded for the option that named it."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_toml(path: str | os.PathLike[str], fail: Callable[[str], Exception], *, option: str) -> dict[str, Any]:
    """The TOML file at `path`; raises `fail(problem)` when it cannot be read or parsed (`option`
    is the command-line option a user gives the file with)."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise fail(f"cannot be read ({error.strerror or error}); give {option} the path of a TOML file") from error
    except tomllib.TOMLDecodeError as error:
        raise fail(f"is not valid TOML ({error})") from error
