"""Store URLs: which backend a URL names, and how to show one without its password."""

from __future__ import annotations

import os
import re
from typing import Literal

Backend = Literal["sqlite", "postgres"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_PASSWORD = re.compile(r"(//[^/:@]*):[^/@]*@")
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def scheme(url: str | os.PathLike[str]) -> str | None:
    """The scheme of `url`, lower-cased, or None for a plain path."""
    match = _SCHEME.match(os.fspath(url))
    return None if match is None else match.group(1).lower()


def after_scheme(url: str) -> int | None:
    """Where `url`'s text after `scheme://` starts, or None for a plain path."""
    match = _SCHEME.match(url)
    return None if match is None else match.end()


def is_postgres_url(url: str | os.PathLike[str]) -> bool:
    """Whether `url` names a PostgreSQL database (`postgresql://` or `postgres://`, in any case)."""
    return scheme(url) in _POSTGRES_SCHEMES


def backend_of(url: str | os.PathLike[str]) -> Backend:
    """The backend that opens `url`: PostgreSQL for its schemes, SQLite for anything else
    (which `open_stores` then accepts or refuses as a SQLite directory)."""
    return "postgres" if is_postgres_url(url) else "sqlite"


def shown_url(url: str) -> str:
    """`url` with its password, if any, replaced by `***` (for messages and logs)."""
    return _PASSWORD.sub(r"\1:***@", url)
