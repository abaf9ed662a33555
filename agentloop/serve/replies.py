"""How a server running turns itself tells a retried message from another: the namespace of
its message ids and a digest of what it says. The outcomes it sent are kept by the bot's
reply store (`agentloop.ports.replies`), which `agentloop.adapters.stores.open_replies`
opens beside the bot's stores: `<bot>.replies.sqlite3` in a SQLite directory, the table
`agentloop_serve_replies` in a PostgreSQL database.

A message id is one namespace per tenant chain and user (`message_scope`); the record keeps the
session and a digest of the message, so the same id with another session or text is told apart.
"""

from __future__ import annotations

import hashlib
import json

from agentloop.context import IncomingMessage, Session
from agentloop.outcome import converter


def message_scope(session: Session) -> str:
    """The namespace of a session's message ids, as text: its tenant chain and user."""
    return json.dumps([session.org_id, session.team_id, session.project_id, session.user_id], separators=(",", ":"))


def message_digest(incoming: IncomingMessage) -> str:
    """A digest of everything a message says, to tell a retry (the same) from another message under one id."""
    return hashlib.sha256(json.dumps(converter.unstructure(incoming), sort_keys=True).encode()).hexdigest()
