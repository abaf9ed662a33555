"""Rows ↔ objects for the SQL stores: the shared converter, taught how a row spells what JSON does not.

`rows.structure(mapping, Cls)` builds an object from a row whose column names are its
field names (extra columns are ignored); `rows.unstructure(obj)` gives the column values.
On top of the shared converter: a dict field is one JSON text column, a `Scope` is its
key text, a vector is float32 bytes, a bool is 0/1, and a field of an attrs class (not a
collection) is a JSON text. A value that already has the target type (a driver that
decodes JSON or timestamps itself) is taken as it is.
"""

from __future__ import annotations

import _json
import json
from datetime import datetime
from typing import Any

import cattrs
import numpy as np

from agentloop.components import ToolExecution
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, NoteMetadata, NoteStatus, NoteType
from agentloop.outcome import converter
from agentloop.ports.tasks import TaskRecord
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope

_encode = _json.make_encoder(None, str, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)
"""`json.dumps(value, default=str)`'s C encoder, made once: `json.dumps` makes one per call, which
was half the cost of encoding a small dict. Without a markers dict it keeps no state between calls."""


def json_text(value: Any) -> str:
    """A value as a JSON text column; what JSON cannot hold is stored as its `str`."""
    try:
        return "".join(_encode(value, 0))
    except RecursionError as exc:  # what the markers dict would have named: a value that contains itself
        raise ValueError(f"this value cannot be stored as JSON: it contains itself or nests too deeply ({exc})") from exc

SCOPE_COLUMNS = ("scope_company", "scope_org", "scope_team", "scope_project", "scope_user", "scope_session")
"""The columns a row keeps its `Scope` in, in the stores that spread it (history, memory, RAG)."""


def scope_values(scope: Scope) -> tuple[str | None, ...]:
    """The column values of `scope`, in `SCOPE_COLUMNS` order."""
    return (scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id, scope.session_id)


def _parsed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _make_rows() -> cattrs.Converter:
    rows = converter.copy()
    rows.register_structure_hook(
        datetime, lambda value, _: value if isinstance(value, datetime) else datetime.fromisoformat(value)
    )
    rows.register_unstructure_hook(Scope, lambda scope: scope.key)
    rows.register_structure_hook(Scope, lambda value, _: Scope.from_key(value))
    rows.register_unstructure_hook(bool, int)
    rows.register_structure_hook(bool, lambda value, _: bool(value))
    rows.register_unstructure_hook(NoteMetadata, lambda metadata: json_text(converter.unstructure(metadata)))
    rows.register_structure_hook(NoteMetadata, lambda value, _: converter.structure(_parsed(value), NoteMetadata))
    as_json = cattrs.gen.override(unstruct_hook=json_text, struct_hook=lambda value, _: _parsed(value))
    as_bytes = cattrs.gen.override(unstruct_hook=_vector_bytes, struct_hook=lambda value, _: np.frombuffer(value, np.float32))
    special: dict[type, dict[str, Any]] = {
        ToolExecution: {"arguments": as_json, "context_snapshot": as_json},
        TaskRecord: {"inputs": as_json},
        KnowledgeItem: {"embedding": as_bytes},
    }
    for cls, fields in special.items():
        rows.register_unstructure_hook(cls, cattrs.gen.make_dict_unstructure_fn(cls, rows, **fields))
        rows.register_structure_hook(cls, cattrs.gen.make_dict_structure_fn(cls, rows, **fields))
    return rows


def _vector_bytes(vector: Vectors) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


rows: cattrs.Converter = _make_rows()
"""The converter between the SQL stores' rows and the objects of the ports."""


def knowledge_row(item: KnowledgeItem) -> dict[str, Any]:
    """The columns of a stored note: its fields, with the owning ids spread into four columns."""
    values: dict[str, Any] = rows.unstructure(item)
    del values["layer_ids"]
    return values | {name: getattr(item.layer_ids, name) for name in _LAYER_ID_COLUMNS}


KNOWLEDGE_COLUMNS = (
    "type", "layer", "company_id", "org_id", "team_id", "project_id", "status", "title", "markdown", "embedding",
    "metadata", "retrieval_count", "usefulness_score", "reference_count", "flagged_for_review", "created_at", "updated_at",
)
"""The columns of a stored note besides its id, in `knowledge_values` order."""


def knowledge_values(item: KnowledgeItem) -> tuple[Any, ...]:
    """`knowledge_row(item)`'s values in `KNOWLEDGE_COLUMNS` order, written out by hand: a bulk
    import stores 100,000 notes, and the converter's generic path was a quarter of its time."""
    ids = item.layer_ids
    metadata = item.metadata
    updated_at = item.updated_at
    return (
        item.type.value, item.layer.value, ids.company_id, ids.org_id, ids.team_id, ids.project_id, item.status.value,
        item.title, item.markdown, _vector_bytes(item.embedding),
        None if metadata is None else json_text(converter.unstructure(metadata)),
        item.retrieval_count, item.usefulness_score, item.reference_count, int(item.flagged_for_review),
        item.created_at.isoformat(), None if updated_at is None else updated_at.isoformat(),
    )


def knowledge_item(row: Any) -> KnowledgeItem:
    """The note a row of `knowledge_row`'s columns holds (a mapping: a dict or a sqlite3.Row),
    built by hand like `knowledge_values`: a search builds one per hit, and the converter's
    generic path was most of a search over a small tenant."""
    metadata, updated_at = row["metadata"], row["updated_at"]
    return KnowledgeItem(
        type=NoteType(row["type"]),
        layer=Layer(row["layer"]),
        layer_ids=LayerIds(row["company_id"], row["org_id"], row["team_id"], row["project_id"]),
        title=row["title"],
        markdown=row["markdown"],
        embedding=np.frombuffer(row["embedding"], np.float32),
        created_at=_moment(row["created_at"]),
        metadata=None if metadata is None else converter.structure(_parsed(metadata), NoteMetadata),
        status=NoteStatus(row["status"]),
        id=row["id"],
        retrieval_count=row["retrieval_count"],
        usefulness_score=row["usefulness_score"],
        reference_count=row["reference_count"],
        flagged_for_review=bool(row["flagged_for_review"]),
        updated_at=None if updated_at is None else _moment(updated_at),
    )


def _moment(value: Any) -> datetime:
    """A timestamp column: a datetime already (PostgreSQL's driver decodes them) or ISO text."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


_LAYER_ID_COLUMNS = ("company_id", "org_id", "team_id", "project_id")
