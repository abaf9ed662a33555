"""The note-taking vocabulary: trajectories of tool executions and the knowledge items
distilled from them."""

from __future__ import annotations

import enum
import functools
import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs
import numpy as np

from agentloop.components import ToolExecution
from agentloop.context import Session
from agentloop.scopes import DEFAULT_COMPANY, Scope
from agentloop.ports.vectors import Vectors

__all__ = [
    "KnowledgeItem",
    "Layer",
    "LayerIds",
    "MaintainerNotice",
    "MergeSuggestion",
    "Note",
    "NoticeKind",
    "NoteMetadata",
    "NoteStatus",
    "NoteType",
    "Retrieval",
    "RetrievedNote",
    "RetrievedNotes",
    "ToolExecution",
    "Trajectory",
]


class NoteType(enum.Enum):
    """What kind of knowledge an item holds; distilled notes are patterns."""

    PATTERN = "pattern"
    ADR = "adr"
    POLICY = "policy"
    SPEC = "spec"


class Layer(enum.Enum):
    """Where a knowledge item lives, from broadest (company) to narrowest (project)."""

    COMPANY = "company"
    ORG = "org"
    TEAM = "team"
    PROJECT = "project"

    @property
    def depth(self) -> int:
        """0 for company (broadest) up to 3 for project (narrowest)."""
        return _DEPTH[self.value]

    @property
    def precedence(self) -> int:
        """Rank on score ties: project (0) wins over team, org, then company (3)."""
        return len(_LAYERS) - 1 - self.depth

    def with_parents(self) -> tuple[Layer, ...]:
        """This layer and every broader one, broadest first."""
        return _LAYERS[: self.depth + 1]


_LAYERS: tuple[Layer, ...] = (Layer.COMPANY, Layer.ORG, Layer.TEAM, Layer.PROJECT)
_DEPTH: dict[str, int] = {layer.value: depth for depth, layer in enumerate(_LAYERS)}


class NoteStatus(enum.Enum):
    """Lifecycle: draft -> proposed -> accepted -> deprecated; draft|proposed -> rejected."""

    DRAFT = "draft"
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    DEPRECATED = "deprecated"
    REJECTED = "rejected"


@attrs.frozen
class LayerIds:
    """A chain of tenant ids, one per layer. A caller's chain bounds what it may see (I11).

    The company is the deployment (one per database unless told otherwise); the other
    ids come from the `Session`.
    """

    company_id: str = DEFAULT_COMPANY
    org_id: str | None = None
    team_id: str | None = None
    project_id: str | None = None

    @classmethod
    def of_session(cls, session: Session, company_id: str = DEFAULT_COMPANY) -> LayerIds:
        return cls(company_id, session.org_id, session.team_id, session.project_id)

    def id_at(self, layer: Layer) -> str | None:
        if layer is Layer.COMPANY:
            return self.company_id
        if layer is Layer.ORG:
            return self.org_id
        if layer is Layer.TEAM:
            return self.team_id
        return self.project_id

    def narrowest(self) -> Layer:
        """The deepest layer this chain has an id for (project, else team, org, company)."""
        return next(layer for layer in reversed(_LAYERS) if self.id_at(layer) is not None)

    def owns_at(self, layer: Layer) -> bool:
        """Whether this is the owning chain of an item at `layer`: an id at the layer and
        none below it."""
        return self.id_at(layer) is not None and all(self.id_at(below) is None for below in _LAYERS[layer.depth + 1 :])

    def truncated(self, layer: Layer) -> LayerIds:
        """The ids of `layer` and its parents only: the owning chain of an item at `layer`."""
        if self.id_at(layer) is None:
            raise ValueError(f"a {layer.value}-layer item needs a {layer.value} id, and this chain has none")
        return LayerIds(
            self.company_id,
            self.org_id if layer.depth >= Layer.ORG.depth else None,
            self.team_id if layer.depth >= Layer.TEAM.depth else None,
            self.project_id if layer.depth >= Layer.PROJECT.depth else None,
        )

    def visible_owners(self, within: Layer = Layer.PROJECT) -> frozenset[LayerIds]:
        """The owning chains of the items a caller with this chain may see (I11): this
        chain truncated to `within` and to each of its parents it has an id for. An item
        is visible exactly when its `layer_ids` is one of them."""
        return _visible_owners(self, within)


@functools.lru_cache(maxsize=4096)
def _visible_owners(chain: LayerIds, within: Layer) -> frozenset[LayerIds]:
    """`LayerIds.visible_owners`, remembered: every note search of a session asks it again."""
    return frozenset(chain.truncated(each) for each in within.with_parents() if chain.id_at(each) is not None)


def _vector(value: Any) -> Vectors:
    array = np.asarray(value, dtype=np.float32)
    if array.ndim != 1:
        raise ValueError(f"an embedding is one vector, got shape {array.shape}")
    return array


@attrs.frozen
class NoteMetadata:
    """Where a distilled note came from: the metadata every distilled note must carry."""

    source_trajectory_id: str
    distillation_timestamp: datetime
    llm_model_used: str | None
    session_id: str
    user_id: str | None
    project_id: str | None
    tags: tuple[str, ...] = ()


@attrs.frozen
class KnowledgeItem:
    """A stored piece of knowledge. `id` is None until the repository assigns one.

    `markdown`, `title`, `metadata` and `embedding` never change once stored (I10); the
    counters, `status` and `flagged_for_review` are what usage and review move.
    """

    type: NoteType
    layer: Layer
    layer_ids: LayerIds
    title: str
    markdown: str
    embedding: Vectors = attrs.field(converter=_vector, eq=False, repr=False)
    created_at: datetime
    metadata: NoteMetadata | None = None
    status: NoteStatus = NoteStatus.DRAFT
    id: int | None = None
    retrieval_count: int = 0
    usefulness_score: int = 0
    reference_count: int = 0
    flagged_for_review: bool = False
    updated_at: datetime | None = None

    def __attrs_post_init__(self) -> None:
        if not self.layer_ids.owns_at(self.layer):
            raise ValueError(
                f"a {self.layer.value}-layer item carries only the ids of its layer and its "
                f"parents; got {self.layer_ids}"
            )

    @property
    def key(self) -> int:
        """The repository id; `ValueError` for an item that was never stored."""
        if self.id is None:
            raise ValueError(f"knowledge item {self.title!r} has no id yet; store it in a repository first")
        return self.id

    @property
    def usefulness_ratio(self) -> float:
        """Positive feedbacks per retrieval (0 before the first retrieval)."""
        return self.usefulness_score / self.retrieval_count if self.retrieval_count else 0.0


Note = KnowledgeItem
"""A distilled note is a knowledge item of type `pattern`."""


@attrs.frozen
class RetrievedNote:
    """One search result: the item, its cosine similarity and its quality-adjusted score
    (the fused rank score of hybrid retrieval, reduced for a flagged note)."""

    item: KnowledgeItem
    similarity: float
    score: float


@attrs.frozen
class RetrievedNotes:
    """Component: the notes offered as context this turn (written by NoteRetrievalSystem)."""

    notes: tuple[RetrievedNote, ...] = ()


@attrs.frozen
class Retrieval:
    """One time a note was offered as context: the query and the session that saw it, with
    the session's whole chain (`session`; None when recorded by an earlier release), and
    the turn it was shown in (None when recorded outside a turn or by an earlier release)."""

    note_id: int
    query: str
    session_id: str | None
    at: datetime
    session: Scope | None = None
    turn_id: str | None = None


@attrs.frozen
class MergeSuggestion:
    """Two accepted notes similar enough that a maintainer may want to merge them."""

    first_id: int
    second_id: int
    similarity: float
    created_at: datetime


class NoticeKind(enum.Enum):
    NOTE_PROPOSED = "note_proposed"
    NOTE_FLAGGED = "note_flagged"
    MERGE_SUGGESTED = "merge_suggested"


@attrs.frozen
class MaintainerNotice:
    """Something a maintainer should review: a proposed or flagged note, or a merge."""

    kind: NoticeKind
    note_ids: tuple[int, ...]
    message: str
    at: datetime


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def trajectory_hash(executions: Sequence[ToolExecution]) -> str:
    """A stable content hash: the tools, arguments, results, errors and nesting, in order.

    Ids and timestamps are left out so the same work done twice hashes the same.
    """
    position = {execution.id: index for index, execution in enumerate(executions)}
    digest = hashlib.sha256()
    for execution in executions:
        parent = position.get(execution.parent_id) if execution.parent_id is not None else None
        record = [execution.tool_name, execution.arguments, execution.result, execution.error, parent]
        digest.update(_canonical(record).encode())
        digest.update(b"\n")
    return digest.hexdigest()


@attrs.frozen
class Trajectory:
    """The tool executions of one session, in the order they started."""

    session_id: str
    executions: tuple[ToolExecution, ...]
    content_hash: str = attrs.field(init=False)

    @content_hash.default
    def _content_hash(self) -> str:
        return trajectory_hash(self.executions)

    @property
    def id(self) -> str:
        """The trajectory's id is its content hash (notes cite it as their source)."""
        return self.content_hash

    def distilled_key(self, owner: LayerIds) -> str:
        """What marks this trajectory distilled for `owner`: the content hash within the
        owner's chain, so identical work of two tenants is distilled for each, and one
        tenant never learns from a skip that another did the same work (I11)."""
        chain = json.dumps([owner.company_id, owner.org_id, owner.team_id, owner.project_id])
        return hashlib.sha256(f"{chain}\n{self.content_hash}".encode()).hexdigest()

    @property
    def duration_s(self) -> float:
        """Seconds from the first start to the last finish (0 when empty)."""
        if not self.executions:
            return 0.0
        start = min(e.started_at for e in self.executions)
        end = max(e.started_at.timestamp() + e.duration_ms / 1000.0 for e in self.executions)
        return end - start.timestamp()

    @property
    def user_id(self) -> str | None:
        return next((e.user_id for e in self.executions if e.user_id is not None), None)

    @property
    def project_id(self) -> str | None:
        return next((e.project_id for e in self.executions if e.project_id is not None), None)
