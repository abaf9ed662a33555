"""Names renamed by the restructuring still import, as the new class, with a DeprecationWarning
that names the replacement; a name that never existed is still an AttributeError."""

from __future__ import annotations

import importlib

import pytest

import agentloop
from agentloop import LlmFailure
from agentloop.errors import DemoCheckError
from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.tasks import InvalidTaskIdError, InvalidTaskTransitionError
from agentloop.workers import MessageIdConflictError

RENAMED = [
    ("agentloop", "LlmError", LlmFailure, "agentloop.LlmFailure"),
    ("agentloop.tasks", "InvalidTaskId", InvalidTaskIdError, "agentloop.tasks.InvalidTaskIdError"),
    ("agentloop.tasks", "InvalidTaskTransition", InvalidTaskTransitionError, "agentloop.tasks.InvalidTaskTransitionError"),
    ("agentloop.workers", "MessageIdConflict", MessageIdConflictError, "agentloop.workers.MessageIdConflictError"),
    ("agentloop.errors", "DemoCheckFailed", DemoCheckError, "agentloop.errors.DemoCheckError"),
    ("agentloop.errors", "InvalidTaskId", InvalidTaskIdError, "agentloop.tasks.errors.InvalidTaskIdError"),
    ("agentloop.errors", "InvalidTaskTransition", InvalidTaskTransitionError, "agentloop.tasks.errors.InvalidTaskTransitionError"),
    ("agentloop.errors", "InvalidTransition", InvalidNoteTransitionError, "agentloop.notes.errors.InvalidNoteTransitionError"),
]


@pytest.mark.parametrize(("module", "old", "new", "new_path"), RENAMED)
def test_an_old_name_gives_the_new_class_and_a_warning_naming_it(module: str, old: str, new: type, new_path: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated; use {new_path}"):
        found = getattr(importlib.import_module(module), old)
    assert found is new


def test_an_old_name_works_in_a_from_import_and_the_warning_points_at_the_importer() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        from agentloop import LlmError  # noqa: F401
    assert LlmError is LlmFailure
    assert caught[0].filename == __file__


def test_an_old_name_is_not_part_of_the_public_surface() -> None:
    assert "LlmError" not in agentloop.__all__
    assert not hasattr(agentloop, "NoSuchName")


MOVED_MODULES = [
    ("agentloop.adapters.sqlite.thread", "agentloop.adapters.sqlite._thread", "StoreThread"),
    ("agentloop.adapters.sqlite.connection", "agentloop.adapters.sqlite._connection", "connect"),
    ("agentloop.adapters.sqlite.scopes", "agentloop.adapters.sqlite._scopes", "SCOPE_COLUMNS"),
    ("agentloop.adapters.sqlite.embedders", "agentloop.adapters.sqlite._embedders", "check_embedder"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED_MODULES)
def test_an_internal_module_the_release_notes_named_still_imports_from_its_old_path_with_a_warning(old: str, new: str, name: str) -> None:
    """The SQLite backend's helpers became internal (a leading underscore); the release notes had given their paths."""
    with pytest.warns(DeprecationWarning, match=f"{old} is internal now"):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize(("old", "new", "name"), MOVED_MODULES)
def test_a_star_import_from_a_moved_modules_old_path_gives_its_names_with_a_warning_and_nothing_of_the_shim(
    old: str, new: str, name: str
) -> None:
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=f"{old} is internal now"):
        exec(f"from {old} import *", namespace)  # noqa: S102 - the statement under test
    assert namespace[name] is getattr(importlib.import_module(new), name)
    assert not {"TYPE_CHECKING", "moved_module", "_moved_module"} & set(namespace)


def test_a_name_a_moved_module_never_had_is_an_attribute_error_naming_the_old_path() -> None:
    with pytest.raises(AttributeError, match="'agentloop.adapters.sqlite.thread' has no attribute 'nothing_here'"):
        importlib.import_module("agentloop.adapters.sqlite.thread").nothing_here  # noqa: B018


@pytest.mark.parametrize("old", ["agentloop.adapters.rows", "agentloop.adapters.private_files", "agentloop.adapters.postgres.database"])
def test_an_internal_module_no_release_gave_users_has_no_old_path(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
