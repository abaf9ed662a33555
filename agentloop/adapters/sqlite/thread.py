"""The old path of `agentloop.adapters.sqlite._thread`, internal to the SQLite backend now: each name
still imports from here, with a DeprecationWarning."""

from typing import TYPE_CHECKING

from agentloop._deprecated import moved_module

if not TYPE_CHECKING:
    __getattr__ = moved_module(__name__, "agentloop.adapters.sqlite._thread")
