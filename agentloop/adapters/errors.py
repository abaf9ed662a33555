"""Errors of the adapters: a store URL no backend opens, a database of a newer release, an index file or embedder that does not match, a program that is not installed."""

from __future__ import annotations

from agentloop.errors import AgentloopError


class IndexFileError(ValueError, AgentloopError):
    """A saved vector index file is truncated, corrupt or of another dimension."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}; delete it or open it with HnswVectorIndex.open_or_rebuild, "
            f"which rebuilds it from the source of truth"
        )


class NewerSchemaError(ValueError, AgentloopError):
    """A database was written by a newer agentloop whose schema this one does not know."""

    def __init__(self, path: str, store: str, found: int, known: int) -> None:
        super().__init__(
            f"{path or 'the database'} holds the {store} schema at version {found}, newer than version {known} "
            f"that this agentloop knows; upgrade agentloop to open it (it was left unchanged)"
        )
        self.path = path
        self.store = store
        self.found = found
        self.known = known


class EmbedderMismatchError(ValueError, AgentloopError):
    """A store's vectors were made by another embedder than the one it is opened with;
    vectors of two embedders cannot be compared."""

    def __init__(self, where: str, recorded: str, given: str) -> None:
        super().__init__(
            f"{where} was embedded by {recorded!r}, but it is opened with the embedder {given!r}; "
            f"open it with {recorded!r}, or re-embed it with the new one: "
            f"agentloop stores reembed URL --bot BOT --embedder SPEC"
        )
        self.where = where
        self.recorded = recorded
        self.given = given


class StoreUrlError(ValueError, AgentloopError):
    """A stores URL names no backend this release has, or a place its stores cannot live."""

    def __init__(self, url: str, problem: str, fix: str) -> None:
        super().__init__(f"cannot open the stores at {url}: {problem}; {fix}")
        self.url = url


class ProgramMissingError(FileNotFoundError, AgentloopError):
    """A program an adapter runs (`espeak-ng`) is not installed; the message says how to install it."""
