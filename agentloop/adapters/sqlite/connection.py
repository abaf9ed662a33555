"""The old path of `agentloop.adapters.sqlite._connection`, internal to the SQLite backend now: each name
still imports from here, with a DeprecationWarning."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from agentloop._deprecated import moved_module as _moved_module

if not _TYPE_CHECKING:
    __getattr__ = _moved_module(__name__, "agentloop.adapters.sqlite._connection")
