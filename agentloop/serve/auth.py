"""Who is calling: bearer tokens mapped to a user and a tenant chain, and session ids bound to them.

The token file (TOML) is the only source of a caller's user and org/team/project: nothing in a
request body can name them. A session id carries an HMAC of the chain and user that created
it, under the server's secret, so every process sharing the secret checks ownership the same
way, before and after a restart, without a lookup.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from typing import Any

import attrs

from agentloop._log import get_logger
from agentloop._toml import read_toml
from agentloop.context import Session
from agentloop.serve.errors import TokenFileError

SECRET_VARIABLE = "AGENTLOOP_SERVE_SECRET"
"""The environment variable holding the session-signing secret when the token file has none."""
_MAC_CHARS = 32
_log = get_logger("agentloop.serve")


ROLES = ("user", "admin")
"""A token's roles: a user's token talks to the bot; an admin's may also erase and export the data of the users
of its tenant chain (and of the chains below it)."""


@attrs.frozen
class Caller:
    """The user and tenant chain a token stands for, and whether it administers that chain."""

    user: str
    org: str | None = None
    team: str | None = None
    project: str | None = None
    admin: bool = False

    def administers(self, org: str | None, team: str | None, project: str | None) -> bool:
        """True when this caller is an admin and the chain `org`/`team`/`project` is its own or below it: the same
        down to the admin's narrowest layer (an org's admin has every team of the org; an admin naming none, all)."""
        mine, theirs = (self.org, self.team, self.project), (org, team, project)
        depth = max((number for number, layer in enumerate(mine, 1) if layer is not None), default=0)
        return self.admin and mine[:depth] == theirs[:depth]

    @property
    def actor(self) -> str:
        """Who this caller is in the audit log: its user and chain (never its token), e.g. `serve:root@acme/-/-`."""
        return f"serve:{self.user}@{'/'.join(layer or '-' for layer in (self.org, self.team, self.project))}"

    def session(self, session_id: str) -> Session:
        """The `Session` of `session_id` for this caller: its chain and user come from the token alone."""
        return Session(session_id, user_id=self.user, project_id=self.project, team_id=self.team, org_id=self.org, channel="http")


@attrs.frozen
class Tokens:
    """The callers of a server, keyed by the sha256 of their token, and the secret that signs session ids."""

    callers: Mapping[str, Caller]
    secret: bytes

    def caller(self, token: str) -> Caller | None:
        """The caller `token` belongs to; None for a token the file does not list."""
        return self.callers.get(token_digest(token))

    def new_session_id(self, caller: Caller) -> str:
        """A fresh session id that only `caller`'s user and chain will be able to use."""
        nonce = secrets.token_hex(12)
        return f"{nonce}.{self._mac(nonce, caller)}"

    def named_session_id(self, caller: Caller, name: str) -> str:
        """The session id a client's own name for a conversation stands for: the same name gives the same
        session to this caller's user and chain only (another caller's same name is another session)."""
        nonce = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return f"{nonce}.{self._mac(nonce, caller)}"

    def owns(self, caller: Caller, session_id: str) -> bool:
        """True when `session_id` was made by `new_session_id` for this user and chain."""
        nonce, dot, mac = session_id.partition(".")
        if not (dot and session_id.isascii()):  # a MAC is hex: anything else is no session of ours
            return False
        return hmac.compare_digest(mac.encode(), self._mac(nonce, caller).encode())

    def _mac(self, nonce: str, caller: Caller) -> str:
        owner = "\x1f".join((nonce, caller.user, caller.org or "", caller.team or "", caller.project or ""))
        return hmac.new(self.secret, owner.encode(), hashlib.sha256).hexdigest()[:_MAC_CHARS]


def token_digest(token: str) -> str:
    """The sha256 of `token` in hex: how the token file and the server know a token without keeping it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def load_tokens(path: str | os.PathLike[str]) -> Tokens:
    """Read the token file at `path`; `TokenFileError` says what is wrong and how to fix it.

    The secret is the file's `secret`, else $AGENTLOOP_SERVE_SECRET, else a random one for this
    process only (logged as a warning: its sessions then end with it and no other process knows them).
    """
    shown = os.fspath(path)
    data = read_toml(path, functools.partial(TokenFileError, shown), option="--tokens")
    entries = data.get("tokens")
    if not isinstance(entries, list) or not entries:
        raise TokenFileError(shown, "lists no tokens; add [[tokens]] tables with token (or sha256) and user")
    callers: dict[str, Caller] = {}
    for number, entry in enumerate(entries, 1):
        digest, caller = _entry(shown, number, entry)
        if digest in callers:
            raise TokenFileError(shown, f"token #{number} is listed twice; each token belongs to one user")
        callers[digest] = caller
    secret = data.get("secret", os.environ.get(SECRET_VARIABLE))
    if secret is None:
        _log.warning(
            "serve.no_secret",
            fix=f"set secret in the token file or ${SECRET_VARIABLE}, the same for every process",
            effect="session ids are valid in this process only, until it stops",
        )
        return Tokens(callers, secrets.token_bytes(32))
    if not isinstance(secret, str) or len(secret) < 16:
        raise TokenFileError(shown, "secret must be a string of at least 16 characters (e.g. from `openssl rand -hex 32`)")
    return Tokens(callers, secret.encode())


def _entry(path: str, number: int, entry: Any) -> tuple[str, Caller]:
    """The sha256 and caller of the token file's entry #`number`."""
    if not isinstance(entry, dict):
        raise TokenFileError(path, f"token #{number} is not a table; write it as [[tokens]] with token and user")
    token, digest, user = entry.get("token"), entry.get("sha256"), entry.get("user")
    if (token is None) == (digest is None):
        raise TokenFileError(path, f"token #{number} needs exactly one of token or sha256")
    if not isinstance(user, str) or not user:
        raise TokenFileError(path, f"token #{number} needs a user (a non-empty string)")
    unknown = set(entry) - {"token", "sha256", "user", "org", "team", "project", "role"}
    if unknown:
        raise TokenFileError(path, f"token #{number} has unknown keys {sorted(unknown)}; use token, sha256, user, org, team, project, role")
    role = entry.get("role", "user")
    if role not in ROLES:
        raise TokenFileError(path, f"token #{number}: role must be one of {', '.join(ROLES)}, not {role!r}")
    chain = {layer: entry.get(layer) for layer in ("org", "team", "project")}
    if any(value is not None and (not isinstance(value, str) or not value) for value in chain.values()):
        raise TokenFileError(path, f"token #{number}: org, team and project are non-empty strings when given")
    if token is not None:
        if not isinstance(token, str) or len(token) < 16:
            raise TokenFileError(path, f"token #{number} must be a string of at least 16 characters")
        digest = token_digest(token)
    elif not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
        raise TokenFileError(path, f"token #{number}: sha256 must be 64 hex digits (sha256sum of the token)")
    return digest.lower(), Caller(user, chain["org"], chain["team"], chain["project"], admin=role == "admin")
