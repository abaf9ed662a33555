"""The PostgreSQL server of a test run (`tests/conftest.py` starts it): empty databases on demand."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
from psycopg import sql

_TEMPLATE = "agentloop_template"


class PostgresServer:
    """The running server: `new_database()` makes an empty database and returns its URL."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self._numbers = itertools.count(1)
        self.admin_url: str = server.get_uri("postgres")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):  # a throwaway server need not survive a crash
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_TEMPLATE)))
        with psycopg.connect(self.url_of(_TEMPLATE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    def url_of(self, database: str) -> str:
        return str(self._server.get_uri(database))

    def new_database(self) -> str:
        name = f"test_{next(self._numbers)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(name), sql.Identifier(_TEMPLATE)))
        return self.url_of(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
