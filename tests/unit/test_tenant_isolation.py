"""Tenant isolation end to end: tenants whose ids repeat at every level run turns through
the standard pipeline with note-taking, and each sees its own answers and nobody else's."""

from __future__ import annotations

import asyncio
import io
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import attrs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentloop import IncomingMessage, LlmReply, LlmRequest, PromptContext, Session, history_scope, knowledge_scope, memory_scope
from agentloop.adapters import open_note_taking
from agentloop.cli import main
from agentloop.notes import DistillationSettings, LayerIds, NoteTaking
from agentloop.testing import RecordingChannel, ScriptedLLM
from postgres_server import PostgresServer
from systems import StandardOptions, StandardPipeline, add_note_taking, standard_pipeline

MARKERS = ("mkalpha", "mkbravo", "mkcharlie")
QUESTION = "When does the shop open?"
_MARKER = re.compile(r"\bmk[a-z]+\b")


@attrs.frozen
class Tenant:
    """One tenant chain and the session id it talks in; `marker` is in everything it stores.
    Any id below the company may be missing."""

    company: str
    org: str | None
    team: str | None
    project: str | None
    user: str | None
    session_id: str
    marker: str

    def session(self, session_id: str | None = None) -> Session:
        return Session(session_id or self.session_id, self.user, self.project, self.team, self.org)

    @property
    def noted_session_id(self) -> str:
        """The session whose trajectory becomes a note: the same id for every tenant that
        talks in the same session id, whatever its company, org, team or project."""
        return f"notes-{self.session_id}"

    @property
    def place(self) -> tuple[str | None, ...]:
        """What indexed answers are shared within: the project in its team and org; without
        a project the user there, without a user the session."""
        chain = (self.company, self.org, self.team)
        if self.project is not None:
            return (*chain, "project", self.project)
        return (*chain, "user", self.user) if self.user is not None else (*chain, "session", self.session_id)

    @property
    def person(self) -> tuple[str | None, ...]:
        """What memory is shared within: the user in the org (without a user, the session)."""
        if self.user is not None:
            return (self.company, self.org, "user", self.user)
        return (self.company, self.org, "session", self.session_id)

    def sees_notes_of(self, other: Tenant) -> bool:
        """Whether `other`'s note (owned by its whole chain) is in this tenant's chain: its
        own chain cut below the company, org, team or project, at a level it has an id for."""
        chain = (self.company, self.org, self.team, self.project)
        cuts = [chain[: depth + 1] + (None,) * (3 - depth) for depth in range(4) if chain[depth] is not None]
        return (other.company, other.org, other.team, other.project) in cuts

    def may_see(self, other: Tenant) -> bool:
        """Whether anything of `other` may reach this tenant's prompt."""
        return other.place == self.place or other.person == self.person or self.sees_notes_of(other)


def note_reply(request: LlmRequest) -> str:
    """A distilled note that carries the marker of the trajectory it came from."""
    marker = _MARKER.search("\n".join(m.content or "" for m in request.messages))
    word = marker.group(0) if marker else "unmarked"
    return (
        f"## Context\nThe shop opening hours for {word}\n\n## Solution\nThe shop opens at nine ({word}).\n\n"
        f"## Key Patterns\nLook the shop hours up for {word}.\n"
    )


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"found {topic}"


@contextmanager
def open_company(
    data_dir: Path | str, company: str, script: Sequence[LlmReply | str]
) -> Iterator[tuple[StandardPipeline, NoteTaking]]:
    """The standard bot with note-taking for one company (the deployment), on shared files."""
    with ExitStack() as stack:
        llm = ScriptedLLM(script)
        options = StandardOptions(company_id=company, rag_k=10)
        pipeline = stack.enter_context(
            standard_pipeline(llm, RecordingChannel(), data_dir=data_dir, tools=[lookup], options=options)
        )
        note_taking = stack.enter_context(
            open_note_taking(
                data_dir, ScriptedLLM(note_reply), company_id=company,
                distillation=DistillationSettings(min_executions=1, min_duration_s=0.0),
            )
        )
        add_note_taking(pipeline, note_taking)
        yield pipeline, note_taking


def write(data_dir: Path | str, company: str, tenants: Sequence[Tenant]) -> None:
    """Each tenant answers in its session, then runs a tool in a session of its own whose
    trajectory is distilled into a note."""
    script: list[LlmReply | str] = []
    for t in tenants:
        script += [f"The shop opens at nine, {t.marker}.", ScriptedLLM.tool_call("lookup", {"topic": t.marker}),
                   f"Looked up {t.marker}."]
    with open_company(data_dir, company, script) as (pipeline, note_taking):
        loop = pipeline.build()
        for t in tenants:
            loop.run_turn_sync(t.session(), IncomingMessage(f"Remember {t.marker}"))
            noted = t.session(t.noted_session_id)
            loop.run_turn_sync(noted, IncomingMessage("Look it up"))
            asyncio.run(note_taking.end_session(noted, success=True))


def ask(data_dir: Path | str, company: str, tenants: Sequence[Tenant]) -> dict[str, tuple[PromptContext, PromptContext]]:
    """Each tenant asks again in its own session and in a later one; the prompts it got."""
    script = [f"Noted, {t.marker}." for t in tenants for _ in range(2)]
    prompts: dict[str, tuple[PromptContext, PromptContext]] = {}
    with open_company(data_dir, company, script) as (pipeline, _):
        loop = pipeline.build()
        for t in tenants:
            same = loop.run_turn_sync(t.session(), IncomingMessage(QUESTION)).require(PromptContext)
            later = loop.run_turn_sync(t.session(f"{t.session_id}-later"), IncomingMessage(QUESTION)).require(PromptContext)
            prompts[t.marker] = (same, later)
    return prompts


def markers(texts: Sequence[str | None]) -> set[str]:
    return set(_MARKER.findall("\n".join(text or "" for text in texts)))


def prompt_markers(prompt: PromptContext, source: str | None = None) -> set[str]:
    if source is None:
        return markers([m.content for m in prompt.to_messages()])
    return markers([s.body for s in prompt.sections if s.source == source])


def notes_listed(data_dir: Path | str, t: Tenant, *command: str) -> set[str]:
    out = io.StringIO()
    named = (("--company", t.company), ("--org", t.org), ("--team", t.team), ("--project", t.project))
    chain = [part for flag, value in named if value is not None for part in (flag, value)]
    where = ["--data-dir", str(data_dir)] if isinstance(data_dir, Path) else ["--stores", data_dir]
    assert main(["notes", *command, *where, *chain], out) == 0
    return markers([out.getvalue()])


def check(data_dir: Path | str, tenants: Sequence[Tenant]) -> None:
    by_company: dict[str, list[Tenant]] = {}
    for t in tenants:
        by_company.setdefault(t.company, []).append(t)
    for company, own in by_company.items():
        write(data_dir, company, own)
    prompts: dict[str, tuple[PromptContext, PromptContext]] = {}
    for company, own in by_company.items():
        prompts.update(ask(data_dir, company, own))
    for t in tenants:
        allowed = {o.marker for o in tenants if t.may_see(o)}
        same_place = {o.marker for o in tenants if o.place == t.place}
        same_person = {o.marker for o in tenants if o.person == t.person}
        noted = {o.marker for o in tenants if t.sees_notes_of(o)}
        same, later = prompts[t.marker]
        assert t.marker in prompt_markers(same) <= allowed, "the prompt in the tenant's own session"
        assert prompt_markers(later) <= allowed, "the prompt in a later session"
        # what a session-bound scope keeps is not the later session's
        assert prompt_markers(later, "memory") <= same_person and (t.marker in prompt_markers(later, "memory")) == (t.user is not None)
        assert prompt_markers(later, "rag") <= same_place
        assert (t.marker in prompt_markers(later, "rag")) == (t.project is not None or t.user is not None)
        assert t.marker in prompt_markers(later, "notes") <= noted
        with open_company(data_dir, t.company, []) as (pipeline, note_taking):
            stores = pipeline.stores
            assert stores is not None
            assert markers([m.content for m in asyncio.run(stores.sessions.recent(history_scope(t.session(), t.company), 100))]) == {t.marker}
            remembered = asyncio.run(stores.memory.recent(memory_scope(t.session(), t.company), 100))
            assert markers([e.assistant_text for e in remembered]) == same_person
            assert markers([h.text for h in asyncio.run(stores.rag.search(knowledge_scope(t.session(), t.company), QUESTION, 50))]) == same_place
            chain = LayerIds.of_session(t.session(), t.company)
            found = asyncio.run(note_taking.knowledge.search(QUESTION, chain, k=50, min_similarity=-1.0))
            assert markers([r.item.markdown for r in found]) == noted
        assert notes_listed(data_dir, t, "list") == noted
        assert notes_listed(data_dir, t, "search", QUESTION, "-k", "50") <= noted


def ids(values: list[str]) -> st.SearchStrategy[str | None]:
    """One of `values`, or missing."""
    return st.none() | st.sampled_from(values)


chains = st.tuples(st.sampled_from(["c1", "c2"]), ids(["acme", "globex"]), ids(["web", "ops"]), ids(["shop", "blog"]),
                   ids(["ada", "bob"]), st.sampled_from(["s1", "s2"]))
PROJECT_UNDER_TWO_ORGS = [("c1", "acme", "web", "shop", "ada", "s1"), ("c1", "globex", "web", "shop", "ada", "s1")]
USER_UNDER_TWO_ORGS = [("c1", "acme", "web", "shop", "ada", "s1"), ("c1", "globex", "ops", "blog", "ada", "s2")]
TEAM_IN_TWO_COMPANIES = [("c1", "acme", "web", "shop", "ada", "s1"), ("c2", "acme", "web", "shop", "ada", "s1")]
TWO_USERS_OF_ONE_PROJECT = [("c1", "acme", "web", "shop", "ada", "s1"), ("c1", "acme", "web", "shop", "bob", "s1")]
TWO_TEAMS_WITHOUT_PROJECTS = [("c1", "acme", "web", None, None, "s1"), ("c1", "acme", "ops", None, None, "s1")]
ONE_CHAIN_IN_TWO_COMPANIES = [("c1", "acme", "web", "shop", "ada", "s1"), ("c2", "acme", "web", "shop", "ada", "s1"),
                              ("c1", None, "web", None, "ada", "s1")]


@settings(deadline=None, max_examples=6)
@given(st.lists(chains, min_size=2, max_size=3, unique=True))
@example(PROJECT_UNDER_TWO_ORGS)
@example(USER_UNDER_TWO_ORGS)
@example(TEAM_IN_TWO_COMPANIES)
@example(TWO_USERS_OF_ONE_PROJECT)
@example(TWO_TEAMS_WITHOUT_PROJECTS)
@example(ONE_CHAIN_IN_TWO_COMPANIES)
def test_no_tenant_sees_another_chains_text_and_each_sees_its_own(chosen: list[tuple[str | None, ...]]) -> None:
    """I11: whichever ids repeat (a project or user id under two orgs, a team id in two
    companies, a session id anywhere, the noted session's id too) and whichever of org,
    team, project and user are missing, no text stored for one chain reaches another
    chain's prompt, memory, RAG or note search, or its `agentloop notes` listing; and
    each chain still finds its own answers, shared with exactly the chains that share
    its project (answers; without one its user or session in the team), its user within
    the org (memory), or its chain (notes)."""
    tenants = [
        Tenant(company, org, team, project, user, session_id, marker)
        for (company, org, team, project, user, session_id), marker in zip(chosen, MARKERS)
    ]
    with tempfile.TemporaryDirectory(prefix="agentloop-tenants-") as data_dir:
        check(Path(data_dir), tenants)


@settings(deadline=None, max_examples=4)
@given(st.lists(chains, min_size=2, max_size=3, unique=True))
@example(ONE_CHAIN_IN_TWO_COMPANIES)
@example(PROJECT_UNDER_TWO_ORGS)
def test_on_postgresql_no_tenant_sees_another_chains_text_and_each_sees_its_own(
    postgres_server: PostgresServer, chosen: list[tuple[str | None, ...]]
) -> None:
    """I11 on the PostgreSQL backend, whose filters are in its SQL: the same tenants, the
    same checks, each example in a database of its own."""
    tenants = [
        Tenant(company, org, team, project, user, session_id, marker)
        for (company, org, team, project, user, session_id), marker in zip(chosen, MARKERS)
    ]
    url = postgres_server.new_database()
    try:
        check(url, tenants)
    finally:
        postgres_server.drop_database(url)
