"""The attempt notes store suite: appended texts per task, removal, reopening, concurrent appends."""

from __future__ import annotations

from collections.abc import Callable


from agentloop.ports.stores import Stores
from agentloop.testing.stores._kit import Backend, at_once, run


class AttemptNotesStoreTests(Backend):
    """`AttemptNotesStore`: one growing text per task, appended to atomically and forgotten on request."""

    def test_a_tasks_text_grows_by_each_append_and_is_forgotten_on_remove(self, stores: Stores) -> None:
        assert run(stores.attempt_notes.read("t1")) is None
        run(stores.attempt_notes.append("t1", "## Attempt 1\n"))
        run(stores.attempt_notes.append("t2", "other task\n"))
        run(stores.attempt_notes.append("t1", "## Attempt 2 \u2014 \u00e9\n"))
        assert run(stores.attempt_notes.read("t1")) == "## Attempt 1\n## Attempt 2 \u2014 \u00e9\n"
        assert run(stores.attempt_notes.remove("t1")) is True
        assert run(stores.attempt_notes.read("t1")) is None and run(stores.attempt_notes.remove("t1")) is False
        assert run(stores.attempt_notes.read("t2")) == "other task\n"

    def test_texts_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.attempt_notes.append("t1", "kept\n"))
        stores.close()
        with open_backend() as again:
            assert run(again.attempt_notes.read("t1")) == "kept\n"

    def test_concurrent_appends_keep_every_text_whole(self, stores: Stores) -> None:
        pieces = [f"[piece {n}: {'x' * 200}]\n" for n in range(16)]
        at_once(lambda piece: stores.attempt_notes.append("t1", piece), pieces)
        text = run(stores.attempt_notes.read("t1")) or ""
        assert sorted(text.splitlines(keepends=True)) == sorted(pieces)
