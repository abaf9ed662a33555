"""Store URLs: which backend a URL names, and how to show one without its password."""

from __future__ import annotations

import os
import re
from typing import Literal

Backend = Literal["sqlite", "postgres"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_PASSWORD = re.compile(r"(//[^/:@?#\s]*):[^/?#\s]*@")
"""A URL's `user:password@`, up to the last `@` of the authority (a password may hold an unescaped `@`)."""
_PARAMETER_PASSWORD = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)", re.IGNORECASE)
"""`password=...` (or `sslpassword=`) in a key=value connection string or a URL's query, quoted or not."""
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


def has_password_parameter(text: str) -> bool:
    """Whether `text` holds a `password=` parameter (a key=value connection string, not a path)."""
    return _PARAMETER_PASSWORD.search(text) is not None


def shown_url(url: str) -> str:
    """`url` (a URL or a key=value connection string, or a message quoting one) with every password
    replaced by `***`: for messages and logs."""
    return _PARAMETER_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", url))
