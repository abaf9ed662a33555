"""Running a script task: an argv list in its own process group, no shell, killed on timeout.

Input reaches a script only through the argument positions its template opens: each
`{{name}}` fills part of one argument (never a new one), and a filled argument may start
with '-' (be read as an option) only where the template writes the dash itself or after
a literal `--` argument. Output is read as it comes and kept up to a limit per stream.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence

from agentloop.tasks.errors import TaskFailedError
from agentloop.tasks.results import TaskFailureReason, TaskResult, TaskStatus

DEFAULT_SCRIPT_OUTPUT_LIMIT = 1_048_576
"""Bytes of stdout, and of stderr, a script task keeps (1 MiB each); the rest is read and dropped."""

_STDERR_TAIL = 2000
_CHUNK = 65536


def refuse_injected_options(written: Sequence[str], argv: Sequence[str], label: str) -> None:
    """`TaskFailedError` if an input made an argument before the template's `--` start with '-'."""
    for index, (template_arg, arg) in enumerate(zip(written, argv, strict=True)):
        if template_arg == "--":
            return
        if arg.startswith("-") and not template_arg.startswith("-"):
            raise TaskFailedError(
                TaskFailureReason.INPUT_VALIDATION_FAILURE,
                f"script task {label!r}: argument {index + 1} ({template_arg!r}) became {arg[:40]!r}, which the "
                f"program would read as an option; inputs may start with '-' only after an <arg>--</arg> "
                f"that the template puts before them",
            )


def _unpassable(arg: str) -> str | None:
    """What in `arg` cannot reach a program as an argument (a NUL byte, or a character the
    file-system encoding cannot encode, such as a lone surrogate), or None."""
    if "\x00" in arg:
        return "a NUL byte"
    try:
        os.fsencode(arg)
    except UnicodeEncodeError as exc:
        return f"{arg[exc.start:exc.end]!r}, a character the file-system encoding cannot encode"
    return None


async def run_command(
    argv: Sequence[str], *, timeout: float, label: str, output_limit: int = DEFAULT_SCRIPT_OUTPUT_LIMIT
) -> TaskResult:
    """Run `argv` (never through a shell) and return its stdout as the result's content.

    The notes hold `exit_code` and `stderr`; stdout and stderr keep at most `output_limit`
    bytes each, and a cut is marked at the end of the text and in `notes["truncated"]`
    (each cut stream's full size in bytes). An argument holding a NUL byte or a character
    the file-system encoding cannot encode, a non-zero exit, a missing program or the timeout (the whole process group is killed) raise
    `TaskFailedError`.
    """
    _check_arguments(argv, label)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise TaskFailedError(
            TaskFailureReason.EXECUTION_HALTED,
            f"script task {label!r} could not start {argv[0]!r}: {exc.strerror or exc}",
        ) from exc
    assert process.stdout is not None and process.stderr is not None
    try:
        (stdout, out_total), (stderr, err_total), _ = await asyncio.wait_for(
            asyncio.gather(
                _read_capped(process.stdout, output_limit), _read_capped(process.stderr, output_limit), process.wait()
            ),
            timeout,
        )
    except TimeoutError:
        await _stop(process)
        raise TaskFailedError(
            TaskFailureReason.EXECUTION_TIMEOUT,
            f"script task {label!r} did not finish within {timeout:g}s and was killed",
        ) from None
    except asyncio.CancelledError:
        await _stop(process)
        raise
    truncated = {name: total for name, total in (("stdout", out_total), ("stderr", err_total)) if total > output_limit}
    out = _text(stdout, "stdout", truncated)
    err = _text(stderr, "stderr", truncated)
    notes: dict[str, object] = {"exit_code": process.returncode, "stderr": err}
    if truncated:
        notes["truncated"] = truncated
    if process.returncode != 0:
        result = TaskResult(out, TaskStatus.FAILED, notes, reason=TaskFailureReason.EXECUTION_HALTED)
        raise TaskFailedError(
            TaskFailureReason.EXECUTION_HALTED,
            f"script task {label!r} exited with status {process.returncode}: {err[-_STDERR_TAIL:].strip()}",
            result=result,
        )
    return TaskResult(out, notes=notes)


def _check_arguments(argv: Sequence[str], label: str) -> None:
    """Refuse an argument no program can receive (a NUL byte, a character the file system cannot encode)."""
    for index, arg in enumerate(argv):
        problem = _unpassable(arg)
        if problem is not None:
            raise TaskFailedError(
                TaskFailureReason.INPUT_VALIDATION_FAILURE,
                f"script task {label!r}: argument {index + 1} holds {problem}, which no program can receive; "
                f"remove it from the input",
            )


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    """The first `limit` bytes of `stream` and its full size, reading it to the end."""
    kept = bytearray()
    total = 0
    while chunk := await stream.read(_CHUNK):
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept), total


def _text(data: bytes, name: str, truncated: dict[str, int]) -> str:
    """The stream's kept bytes as text, ending with a marker line if it was cut."""
    text = data.decode("utf-8", errors="replace")
    if name in truncated:
        text += f"\n[... {name} cut: kept the first {len(data)} of {truncated[name]} bytes ...]"
    return text


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Kill the script's process group and close its pipes: a child that left the group
    (`setsid`, a daemon) may hold them open, and waiting for them would outlast the timeout."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # asyncio has no public way to close a Process's pipes; wait() returns once they are closed.
    transport: asyncio.SubprocessTransport = process._transport  # type: ignore[attr-defined]
    transport.close()
    await process.wait()
