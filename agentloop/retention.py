"""How long a bot keeps what it stores (`Retention`), read from a TOML file or flags, and what
a prune removed (`PruneReport`); the backends apply it (`agentloop.adapters.prune_stores`)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from agentloop.errors import AgentloopError

DAY = timedelta(days=1)


class RetentionError(ValueError, AgentloopError):
    """A retention setting that cannot be applied: the message names the setting and the fix."""


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise RetentionError(f"retention {attribute.name} must be a whole number of at least 1, got {value!r}; leave it out to keep forever")


@attrs.frozen
class Retention:
    """How long each store keeps its rows; None keeps them forever (the default for each).

    `history_days`: a history whose last message is older goes whole (its messages and summaries).
    `history_turns`: a history keeps its newest turns only (a turn starts at a user message).
    `trajectories_days`: tool executions go this long after their session was distilled.
    `inbox_days`: finished inbox messages (PostgreSQL workers) go this long after they finished.
    `usage_days`: per-call usage rows older are rolled up into one row per day, session and model.
    `summaries_days`: history summaries older than this go.
    `approvals_days`: decided approvals asked for longer ago than this go.
    `every_minutes`: how often `agentloop worker` and `agentloop serve` prune.
    """

    history_days: int | None = attrs.field(default=None, validator=_positive)
    history_turns: int | None = attrs.field(default=None, validator=_positive)
    trajectories_days: int | None = attrs.field(default=None, validator=_positive)
    inbox_days: int | None = attrs.field(default=None, validator=_positive)
    usage_days: int | None = attrs.field(default=None, validator=_positive)
    summaries_days: int | None = attrs.field(default=None, validator=_positive)
    approvals_days: int | None = attrs.field(default=None, validator=_positive)
    every_minutes: int = attrs.field(default=24 * 60, validator=_positive)

    @property
    def empty(self) -> bool:
        """Whether nothing is set: a prune would only compact."""
        return all(getattr(self, name) is None for name in SETTINGS)

    def before(self, setting: str, now: datetime) -> datetime | None:
        """The time before which `setting`'s rows go (None when it is not set)."""
        days: int | None = getattr(self, setting)
        return None if days is None else now - days * DAY


SETTINGS = tuple(field.name for field in attrs.fields(Retention) if field.name != "every_minutes")
"""The settings that remove rows, in the order a prune applies them."""


def retention_from(values: Mapping[str, Any], *, where: str = "retention") -> Retention:
    """The `Retention` of a mapping of setting names to numbers; a RetentionError names any unknown one."""
    known = {field.name for field in attrs.fields(Retention)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise RetentionError(f"{where}: unknown setting {unknown[0]!r}; the settings are {', '.join(sorted(known))}")
    return Retention(**values)


def load_retention(path: str | os.PathLike[str]) -> Retention:
    """The `Retention` a TOML file gives, in its `[retention]` table or at its top level."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise RetentionError(f"cannot read the retention file {file}: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise RetentionError(f"the retention file {file} is not valid TOML: {error}") from None
    table = data.get("retention", data)
    if not isinstance(table, dict):
        raise RetentionError(f"{file}: [retention] must be a table of settings")
    return retention_from(table, where=str(file))


@attrs.frozen
class PruneReport:
    """What one prune did: rows removed per store (usage: per-call rows rolled up into
    `rolled_up` day rows), and the bytes the stores took before and after (None where not measured)."""

    deleted: Mapping[str, int] = attrs.field(factory=dict)
    rolled_up: int = 0
    bytes_before: int | None = None
    bytes_after: int | None = None
    compacted: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    def line(self) -> str:
        """The report in one line, as the CLI prints it."""
        counts = ", ".join(f"{store} {count}" for store, count in sorted(self.deleted.items()) if count) or "nothing"
        size = "" if self.bytes_before is None or self.bytes_after is None else f"; {self.bytes_before} -> {self.bytes_after} bytes"
        rolled = f" ({self.rolled_up} usage day row(s))" if self.rolled_up else ""
        return f"pruned {counts}{rolled}{size}"
