"""Running a script task: an argv list in its own process group, no shell, killed on timeout."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence

from agentloop.errors import TaskFailedError
from agentloop.tasks.results import TaskFailureReason, TaskResult, TaskStatus

_STDERR_TAIL = 2000


async def run_command(argv: Sequence[str], *, timeout: float, label: str) -> TaskResult:
    """Run `argv` (never through a shell) and return its stdout as the result's content.

    The notes hold `exit_code` and `stderr`. A non-zero exit, a missing program or the
    timeout (the whole process group is killed) raise `TaskFailedError`.
    """
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
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        _kill_group(process.pid)
        await process.wait()
        raise TaskFailedError(
            TaskFailureReason.EXECUTION_TIMEOUT,
            f"script task {label!r} did not finish within {timeout:g}s and was killed",
        ) from None
    except asyncio.CancelledError:
        _kill_group(process.pid)
        await process.wait()
        raise
    out = stdout.decode("utf-8", errors="replace")
    err = stderr.decode("utf-8", errors="replace")
    notes = {"exit_code": process.returncode, "stderr": err}
    if process.returncode != 0:
        result = TaskResult(out, TaskStatus.FAILED, notes, reason=TaskFailureReason.EXECUTION_HALTED)
        raise TaskFailedError(
            TaskFailureReason.EXECUTION_HALTED,
            f"script task {label!r} exited with status {process.returncode}: {err[-_STDERR_TAIL:].strip()}",
            result=result,
        )
    return TaskResult(out, notes=notes)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
