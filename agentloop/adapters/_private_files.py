"""Creating a bot's data files and folders readable by their owner only (0600 and 0700).

The modes are asked for when a file or folder is made (`os.open` and `mkdir` with a mode, then
`chmod` for a folder, whose parents `mkdir` would make with the umask's mode), so whatever the
umask, nothing the library creates is readable by other local users. What exists already keeps
its mode: an operator's choice is not undone. SQLite gives a database's -wal and -shm files the
mode of the database file, so creating that file first is enough.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def private_folder(path: Path) -> None:
    """Make the folder `path` and any missing parents, each 0700; existing ones are left as they are."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    for folder in missing:
        os.chmod(folder, FOLDER_MODE)


def private_file(path: Path) -> None:
    """Create `path` empty and 0600 unless it exists (its folder must exist)."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    os.close(handle)


def write_private(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path`, replacing what it held; a file it creates is 0600."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
