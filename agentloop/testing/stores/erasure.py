"""The erase and export suite: a subject's rows leave every store and every read path, search
included, while every other tenant's stay as they were; an export holds the subject's rows only."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.messages import ChatMessage
from agentloop.notes import Layer, LayerIds, NoteStatus
from agentloop.ports.stores import MemoryEntry, Stores
from agentloop.ports.summaries import SessionSummary
from agentloop.ports.usage import UsageFilter, UsageRecord
from agentloop.privacy import Subject
from agentloop.scopes import Scope
from agentloop.testing.notes import make_execution
from agentloop.testing.stores._kit import AT, CHAIN, Backend, namesakes, run, unique
from agentloop.testing.stores.approvals import ApprovalStoreTests
from agentloop.testing.stores.knowledge import KnowledgeRepositoryTests
from agentloop.testing.stores.usage import priced


async def remember(stores: Stores, history: Scope, word: str) -> None:
    """One row of every kind a turn of the session `history` leaves, each text holding `word`."""
    session = history.session_id or "s"
    user_scope = Scope(history.company_id, history.org_id, user_id=history.user_id) if history.user_id else history
    project = Scope(history.company_id, history.org_id, history.team_id, history.project_id)
    await stores.sessions.append(history, [ChatMessage.user(f"{word} asks"), ChatMessage.assistant(f"{word} answered")])
    await stores.memory.add(MemoryEntry(user_scope, session, f"{word} said", f"{word} heard", AT))
    await stores.rag.add(project, f"{word} indexed answer", session_id=session)
    await stores.summaries.add(SessionSummary(history, 1, 2, f"{word} summary", AT))
    await stores.usage.record(UsageRecord(f"turn-{word}-{next(unique)}", history, AT, (priced(),)))
    await stores.approvals.add(ApprovalStoreTests.pending(f"approval-{word}-{next(unique)}", history))
    execution = attrs.evolve(
        make_execution("search", session_id=session, arguments={"q": word}, user_id=history.user_id, project_id=history.project_id),
        company_id=history.company_id, org_id=history.org_id, team_id=history.team_id,
    )
    await stores.trajectories.append([execution])
    owner, layer = _layer(history)
    note = await stores.knowledge.add(attrs.evolve(
        KnowledgeRepositoryTests.note(stores, next(unique)), layer=layer, layer_ids=owner, title=f"{word} lesson",
        markdown=f"# {word} lesson\n",
    ))
    await stores.trajectories.mark_distilled(f"hash-{word}-{next(unique)}", session, note.key, AT)


def _layer(history: Scope) -> tuple[LayerIds, Layer]:
    """The owner and layer of a note distilled from a session of `history`: its project's, else its team's, else its org's."""
    owner = LayerIds(history.company_id, history.org_id, history.team_id, history.project_id)
    layer = Layer.PROJECT if history.project_id else Layer.TEAM if history.team_id else Layer.ORG if history.org_id else Layer.COMPANY
    return owner.truncated(layer), layer


async def seen(stores: Stores, history: Scope, word: str) -> dict[str, Any]:
    """What every read path of the stores returns for the session `history` and a search for `word`."""
    session = history.session_id or "s"
    user_scope = Scope(history.company_id, history.org_id, user_id=history.user_id) if history.user_id else history
    project = Scope(history.company_id, history.org_id, history.team_id, history.project_id)
    ids = UsageFilter(*(history.company_id, history.org_id, history.team_id, history.project_id, history.user_id, session))
    trajectory = await stores.trajectories.load(session, history)
    owner, layer = _layer(history)
    notes = await stores.knowledge.keyword_search(word, 10, caller=owner, layer=layer, statuses=list(NoteStatus))
    return {
        "notes": sorted(note.title for note, _ in notes if word in note.title),
        "history": [m.content for m in await stores.sessions.recent(history, 100)],
        "count": await stores.sessions.count(history),
        "memory": [e.user_text for e in await stores.memory.recent(user_scope, 100)],
        "rag": sorted(text for text in await stores.rag.texts(project) if word in text),
        "search": sorted(hit.text for hit in await stores.rag.search(project, word, 10) if word in hit.text),
        "summary": [s.text for s in await stores.summaries.versions(history)],
        "usage": (await stores.usage.total(ids)).calls,
        "approvals": [p.request.approval_id for p in await stores.approvals.pending(history, session)],
        "trajectory": [json.dumps(e.arguments) for e in trajectory.executions],
    }


def holds(found: object, word: str) -> bool:
    return word in json.dumps(found, default=str)


def export(stores: Stores, subject: Subject) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [record async for record in stores.export(subject, actor="test")]

    return run(collect())


ADA = Subject.user("ada", company_id=CHAIN.company_id, org_id=CHAIN.org_id)


def other_users() -> list[Scope]:
    """Tenants that are not the user ada of org o1: another company, org or user, each session with
    an id of its own (a row shared by a project names its session by id only, as sessions' ids are unique)."""
    return [attrs.evolve(scope, session_id=f"s-{next(unique)}") for scope in namesakes(CHAIN, ("company_id", "org_id", "user_id"))]


class ErasureTests(Backend):
    """`Stores.erase` and `Stores.export`: what a subject is kept as, and nothing of it after an erase."""

    def test_erasing_a_user_leaves_nothing_of_theirs_and_every_namesake_tenant_unchanged(self, stores: Stores) -> None:
        others = [(scope, f"w{next(unique)}x") for scope in other_users()]
        for scope, word in [(CHAIN, "adaword"), *others]:
            run(remember(stores, scope, word))
        before = {scope: run(seen(stores, scope, word)) for scope, word in others}
        assert holds(run(seen(stores, CHAIN, "adaword")), "adaword")
        erased = run(stores.erase(ADA, actor="admin"))
        assert erased.sessions == 2 and erased.memory >= 1 and erased.rag == 1 and erased.usage == 1
        assert not holds(run(seen(stores, CHAIN, "adaword")), "adaword")
        assert {scope: run(seen(stores, scope, word)) for scope, word in others} == before

    def test_erasing_again_removes_nothing_and_each_erase_is_audited_without_content(self, stores: Stores) -> None:
        run(remember(stores, CHAIN, "adaword"))
        first = run(stores.erase(ADA, actor="admin"))
        again = run(stores.erase(ADA, actor="admin"))
        assert first.total > 0 and again.total == 0
        records = run(stores.audit.records())
        assert [(r.actor, r.action, r.subject["user_id"]) for r in records] == [("admin", "erase", "ada")] * 2
        assert records[0].counts["sessions"] == 2 and not holds(attrs.asdict(records[0]), "adaword")

    def test_erasing_a_session_leaves_the_users_other_sessions(self, stores: Stores) -> None:
        other = attrs.evolve(CHAIN, session_id="s2")
        run(remember(stores, CHAIN, "firstword"))
        run(remember(stores, other, "secondword"))
        run(stores.erase(Subject.session("s1", company_id="acme", org_id="o1"), actor="admin"))
        assert not holds(run(seen(stores, CHAIN, "firstword")), "firstword")
        assert holds(run(seen(stores, other, "secondword")), "secondword")

    def test_erasing_a_chain_leaves_other_orgs(self, stores: Stores) -> None:
        other = attrs.evolve(CHAIN, org_id="o2")
        run(remember(stores, CHAIN, "firstword"))
        run(remember(stores, other, "secondword"))
        run(stores.erase(Subject.chain(company_id="acme", org_id="o1"), actor="admin"))
        assert not holds(run(seen(stores, CHAIN, "firstword")), "firstword")
        assert holds(run(seen(stores, other, "secondword")), "secondword")

    def test_export_holds_every_store_of_the_subject_and_nothing_of_namesakes(self, stores: Stores) -> None:
        run(remember(stores, CHAIN, "adaword"))
        for scope in other_users():
            run(remember(stores, scope, "otherword"))
        records = export(stores, ADA)
        assert {r["store"] for r in records} >= {"sessions", "memory", "rag", "summaries", "usage", "approvals", "trajectories"}
        assert holds(records, "adaword") and not holds(records, "otherword")
        assert json.loads(json.dumps(records, default=str))
        assert [r.action for r in run(stores.audit.records())] == ["export"]

    def test_notes_distilled_from_the_subjects_sessions_are_removed_and_others_redistilled(self, stores: Stores) -> None:
        run(remember(stores, CHAIN, "adaword"))
        ids = LayerIds("acme", "o1", "t1", "p1")
        note = run(stores.knowledge.add(attrs.evolve(KnowledgeRepositoryTests.note(stores, 7), title="adaword lesson")))
        assert note.id is not None
        run(stores.trajectories.mark_distilled("hash-ada", "s1", note.id, AT))
        run(stores.trajectories.mark_distilled("hash-bob", "bob-session", note.id, AT + timedelta(seconds=1)))
        run(stores.erase(ADA, actor="admin"))
        statuses = list(NoteStatus)
        assert all(item.id != note.id for item in run(stores.knowledge.items()))
        assert run(stores.knowledge.keyword_search("adaword", 5, caller=ids, layer=Layer.PROJECT, statuses=statuses)) == []
        assert not run(stores.trajectories.is_distilled("hash-ada"))
        assert not run(stores.trajectories.is_distilled("hash-bob"))


    def test_a_note_of_another_orgs_session_of_the_same_id_is_not_the_subjects(self, stores: Stores) -> None:
        """A distilled row names its session only: another tenant's session with the same id keeps its note."""
        run(remember(stores, CHAIN, "adaword"))
        run(remember(stores, attrs.evolve(CHAIN, org_id="o2", user_id="eve"), "eveword"))
        run(stores.erase(ADA, actor="admin"))
        titles = [item.title for item in run(stores.knowledge.items())]
        assert "eveword lesson" in titles and "adaword lesson" not in titles


_word = st.text("abcdefghij", min_size=4, max_size=6).map(lambda w: f"q{w}z")


class ErasureProperties(Backend):
    """I11 for erase, as a property over generated tenants, users and sessions."""

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(
        users=st.lists(st.tuples(st.sampled_from(["o1", "o2"]), st.sampled_from(["ada", "bob", "eve"]), st.sampled_from(["p1", None])),
                       min_size=2, max_size=5, unique=True),
        victim=st.integers(0, 4),
    )
    def test_after_erasing_a_user_no_read_path_returns_their_text_and_others_are_unchanged(
        self, open_backend: Any, users: list[tuple[str, str, str | None]], victim: int
    ) -> None:
        """I11-erase: after erasing a user no read path of any store (search included) returns their
        text, and every other user's reads are as they were."""
        with open_backend() as stores:
            rows = [(Scope("acme", org, "t1", project, user, f"{org}-{user}-{next(unique)}"), f"w{next(unique)}x")
                    for org, user, project in users]
            for scope, word in rows:
                run(remember(stores, scope, word))
            gone = rows[victim % len(rows)][0]
            kept = [(s, w) for s, w in rows if (s.org_id, s.user_id) != (gone.org_id, gone.user_id)]
            before = {s: run(seen(stores, s, w)) for s, w in kept}
            run(stores.erase(Subject.user(gone.user_id or "", company_id="acme", org_id=gone.org_id), actor="test"))
            for scope, word in rows:
                if (scope.org_id, scope.user_id) == (gone.org_id, gone.user_id):
                    assert not holds(run(seen(stores, scope, word)), word)
            assert {s: run(seen(stores, s, w)) for s, w in kept} == before
