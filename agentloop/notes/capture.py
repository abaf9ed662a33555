"""Trajectory capture off the tool's path: a non-blocking, thread-safe enqueue, batched
background writes, a retry queue for failed writes, quarantine for an execution the store
refuses, rate-triggered sampling, and a drain on close.

The tool runner calls `TrajectoryRecorder.enqueue` right after a tool finishes; it only
appends to an in-memory buffer. A writer thread (`start()`) writes a batch when the
buffer holds `batch_size` events or `flush_interval_s` has passed since the last flush
(measured on the injected Clock), and retries failed batches with exponential backoff.
A failed batch is split so its good executions are written; one the store refuses for
what it holds is quarantined (kept, counted, logged), so no single execution blocks the
others, while one that failed on a passing store error waits for a retry.
`close()` stops the writer and drains everything accepted to the store (I12).

The store's port is async; writes happen on the writer's own thread (or the thread that
flushes or drains), never on the bot's event loop, so each write runs to completion on
a private event loop there (the writer thread keeps its own from write to write: making
a loop per write cost more than the write), and enqueue stays a plain, non-blocking call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import attrs

from agentloop._log import get_logger
from agentloop._text import storable
from agentloop.components import ToolExecution
from agentloop.notes.errors import CaptureDrainError, RecorderClosedError
from agentloop.ports.clock import Clock, SystemClock
from agentloop.telemetry import TELEMETRY

if TYPE_CHECKING:
    from agentloop.ports.metrics import Metrics
    from agentloop.ports.trajectories import TrajectoryStore

BATCH_SIZE_METRIC = "note_taking.capture.batch_size"
DATA_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, OverflowError)
"""Errors that blame the execution written, not the store (a UnicodeEncodeError, or the
`ExecutionRefusedError` a store raises for an execution too large to hold): an execution
that alone raises one of these is quarantined at once. Any other error may pass (a locked
database, a disk I/O error), so it only ever sends the execution back to be retried."""
QUARANTINE_MEMORY = 1000
"""How many quarantined executions `TrajectoryRecorder.quarantined` keeps in memory (the
most recent); the store keeps them all and `stats` counts them all."""
RATE_WINDOW_S = 60.0
"""The span over which a session's tool-run rate is measured; a window whose newest run
is older than this is dropped, so the rate state holds only recently active sessions."""


def quarantine_record(execution: ToolExecution, reason: str) -> dict[str, str]:
    """What a trajectory store keeps of an execution it refused (`TrajectoryStore.quarantined`):
    id, session, tool and reason backslash-escaped to ASCII, and the whole execution as ASCII JSON,
    a form no store can refuse for what it holds."""

    def escaped(text: str) -> str:
        return text.encode("ascii", "backslashreplace").decode("ascii")

    return {
        "id": escaped(execution.id),
        "session_id": escaped(execution.session_id),
        "tool_name": escaped(execution.tool_name),
        "reason": escaped(reason),
        "execution": json.dumps(attrs.asdict(execution), default=str),
    }


QUARANTINE_KEEP = 65_536
"""How much of a quarantined execution's JSON is kept when the whole is too large to store."""


def cut_quarantine_record(record: dict[str, str]) -> dict[str, str]:
    """`record` with its execution JSON cut to its first `QUARANTINE_KEEP` characters, marked
    as cut: what a store keeps when the whole is more than it can hold."""
    kept = record["execution"]
    return {**record, "execution": f"{kept[:QUARANTINE_KEEP]}...[cut: {len(kept):,} characters]"}


@attrs.frozen
class CaptureSettings:
    """512 events or 5 s per batch; above 100 tool runs a minute in a session, successful
    runs are kept at 10% (failed ones always). `close()` keeps retrying a store that
    refuses writes for up to `close_timeout_s`."""

    batch_size: int = 512
    """Large enough that a busy bot's writes pay each batch's fixed costs (a hand-over to the
    store's thread, a commit, an index page per session) once per many executions: with 100
    sessions taking turns, a batch of 100 wrote about one index page per execution, 512 one
    per five. A quiet bot writes on the interval."""
    flush_interval_s: float = 5.0
    sampling_threshold_per_minute: int = 100
    sampling_rate: float = 0.1
    retry_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    drain_attempts: int = 3
    poll_interval_s: float | None = None
    """How often the writer wakes to check the interval; default a quarter of it, at most 1 s."""
    dedup_window: int = 4096
    """How many recent execution ids are remembered so one execution is captured once."""
    close_timeout_s: float = 10.0
    drain_timeout_s: float = 5.0
    """How long `NoteTaking.end_session` lets capture drain (off the event loop) before it
    reports the session FAILED with the executions still queued."""
    quarantine_after_rounds: int = 5
    """An execution that keeps failing on its own, twice in a row, in this many separate
    write rounds is quarantined even though the store's error does not blame it."""

    def __attrs_post_init__(self) -> None:
        if self.batch_size < 1 or self.flush_interval_s <= 0:
            raise ValueError("batch_size must be at least 1 and flush_interval_s positive")
        if not 0.0 <= self.sampling_rate <= 1.0:
            raise ValueError(f"sampling_rate is a fraction in [0, 1], got {self.sampling_rate}")
        if min(self.sampling_threshold_per_minute, self.drain_attempts, self.quarantine_after_rounds) < 1:
            raise ValueError(
                "sampling_threshold_per_minute, drain_attempts and quarantine_after_rounds must be at least 1"
            )
        if self.close_timeout_s < 0 or self.drain_timeout_s < 0:
            raise ValueError(
                f"close_timeout_s and drain_timeout_s must not be negative, got {self.close_timeout_s} "
                f"and {self.drain_timeout_s}"
            )


@attrs.frozen
class CaptureStats:
    """Counts since the recorder was made: `accepted == written + quarantined + pending`
    at all times, and every offered execution is accepted, sampled out or a duplicate."""

    accepted: int
    written: int
    pending: int
    sampled_out: int
    duplicates: int
    failed_flushes: int
    quarantined: int = 0


@attrs.frozen
class QuarantinedExecution:
    """An execution the store refused on its own, and why; the store's quarantine holds it."""

    execution: ToolExecution
    reason: str


@attrs.define
class _Batch:
    events: list[ToolExecution]
    attempts: int = 0
    due_at: float = 0.0


class TrajectoryRecorder:
    """Buffers tool executions and writes them to a `TrajectoryStore` in batches."""

    def __init__(
        self,
        store: TrajectoryStore,
        *,
        settings: CaptureSettings | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        logger: Any = None,
    ) -> None:
        self.store = store
        self.settings = settings or CaptureSettings()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self._rng = rng or random.Random()
        self._log = logger if logger is not None else get_logger("agentloop.notes.capture")
        self._buffer: deque[ToolExecution] = deque()
        self._retry: list[_Batch] = []
        self._write_lock = threading.Lock()
        """Held for each store write, so one writer (thread, flush or drain) writes at a time."""
        self._lock = threading.Lock()
        """Held while enqueue decides and while events move between buffer, in flight,
        retry, written and quarantined (never during a store write), so `stats` always
        sees each event in exactly one place."""
        self._windows: OrderedDict[str, deque[float]] = OrderedDict()
        """Each session's recent run times, least recently active first."""
        self._sampling: dict[str, int] = {}
        self._seen: set[str] = set()
        self._seen_order: deque[str] = deque()
        self._accepted = 0
        self._written = 0
        self._sampled_out = 0
        self._duplicates = 0
        self._failed_flushes = 0
        self._in_flight = 0
        self._quarantined = 0
        self.quarantined: deque[QuarantinedExecution] = deque(maxlen=QUARANTINE_MEMORY)
        """The most recently quarantined executions, oldest first (`stats` counts them all)."""
        self._lone_failures: dict[str, int] = {}
        """How many write rounds each pending execution failed on its own, by id (used only
        under the write lock)."""
        self._last_flush = self.clock.monotonic()
        self._closed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer_loop = threading.local()
        """The writer thread's private event loop (`runner`), kept while the thread runs."""

    # -- the tool's path -------------------------------------------------------------

    def enqueue(self, execution: ToolExecution) -> bool:
        """Accept one finished tool execution without blocking (from any thread); False if
        it was sampled out or was already captured. `RecorderClosedError` after `close()`."""
        with self._lock:
            if self._closed:
                raise RecorderClosedError(
                    f"tool execution {execution.id} arrived after the trajectory recorder was closed; "
                    f"close the recorder only after the last turn has finished"
                )
            key = execution.id
            if key in self._seen:
                self._duplicates += 1
                return False
            self._seen.add(key)
            self._seen_order.append(key)
            if len(self._seen_order) > self.settings.dedup_window:
                self._seen.discard(self._seen_order.popleft())
            if self._sampled(execution):
                self._sampled_out += 1
                self._sampling[execution.session_id] += 1
                return False
            self._buffer.append(execution)
            self._accepted += 1
            full = len(self._buffer) == self.settings.batch_size  # wake the writer once per batch, not per event
        if full:
            self._wake.set()
        return True

    def _sampled(self, execution: ToolExecution) -> bool:
        """Whether to drop this execution: only while the session's rate is over the
        threshold, only successful ones, and then with probability 1 - sampling_rate."""
        settings = self.settings
        session_id = execution.session_id
        now = self.clock.monotonic()
        self._drop_idle_windows(now)
        window = self._windows.get(session_id)
        if window is None:
            window = self._windows[session_id] = deque(maxlen=settings.sampling_threshold_per_minute + 1)
        else:
            self._windows.move_to_end(session_id)
        window.append(now)
        active = len(window) == window.maxlen and now - window[0] < RATE_WINDOW_S
        if active != (session_id in self._sampling):
            self._set_sampling(session_id, active)
        if not active or execution.error is not None:
            return False
        return self._rng.random() >= settings.sampling_rate

    def _drop_idle_windows(self, now: float) -> None:
        """Forget the rate window of every session with no run in the last minute."""
        windows = self._windows
        while windows:
            session_id, window = next(iter(windows.items()))
            if now - window[-1] < RATE_WINDOW_S:
                return
            del windows[session_id]
            if session_id in self._sampling:
                self._set_sampling(session_id, False)

    def _set_sampling(self, session_id: str, active: bool) -> None:
        if active:
            self._sampling[session_id] = 0
            self._log.info(
                "capture.sampling", session_id=session_id, active=True,
                threshold_per_minute=self.settings.sampling_threshold_per_minute, rate=self.settings.sampling_rate,
            )
        else:
            dropped = self._sampling.pop(session_id)
            self._log.info("capture.sampling", session_id=session_id, active=False, sampled_out=dropped)

    def sampling_active(self, session_id: str) -> bool:
        return session_id in self._sampling

    def forget_session(self, session_id: str) -> None:
        """Drop the session's rate window (its events stay queued until written)."""
        with self._lock:
            self._windows.pop(session_id, None)
            if session_id in self._sampling:
                self._set_sampling(session_id, False)

    # -- the writer ------------------------------------------------------------------

    def tick(self) -> int:
        """What the writer does when it wakes: write if a batch is full, the flush
        interval has passed with events waiting, or a failed batch is due for retry."""
        now = self.clock.monotonic()
        buffered = len(self._buffer)
        if (
            buffered >= self.settings.batch_size
            or (buffered and now - self._last_flush >= self.settings.flush_interval_s)
            or any(batch.due_at <= now for batch in self._retry)
        ):
            return self.flush()
        return 0

    def flush(self) -> int:
        """Write the buffer now, then every failed batch whose backoff has passed.

        Returns how many events were written. A failed write goes to the retry queue
        (an execution the store refuses on its own to quarantine); nothing is raised,
        nothing is lost.
        """
        with self._write_lock:
            now = self.clock.monotonic()
            self._last_flush = now
            written = 0
            taken = self._take_buffer()
            if taken:
                written += self._write(_Batch(taken), now)
            for batch in self._take_retries(due_by=now):
                written += self._write(batch, now)
            return written

    def drain(self, timeout: float | None = None) -> int:
        """Write everything pending now; returns how many were written.

        Without `timeout`, tries `drain_attempts` rounds at once; with it, retries with
        backoff until everything is written or `timeout` seconds have passed. Raises
        `CaptureDrainError` if events are still pending (they stay queued).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._write_lock.acquire(timeout=-1 if deadline is None else max(deadline - time.monotonic(), 0.0)):
            raise self._pending_error("the trajectory store is still busy with an earlier write")
        try:
            written = 0
            for attempt in itertools.count(1):
                now = self.clock.monotonic()
                self._last_flush = now
                batches = self._take_retries(due_by=None)
                taken = self._take_buffer()
                if taken:
                    batches.append(_Batch(taken))
                for batch in batches:
                    written += self._write(batch, now)
                if not self._retry:
                    return written
                if deadline is None:
                    if attempt >= self.settings.drain_attempts:
                        break
                    continue
                delay = min(self._backoff(attempt), deadline - time.monotonic())
                if delay <= 0:
                    break
                time.sleep(delay)
        finally:
            self._write_lock.release()
        raise self._pending_error(f"the store refused them for {attempt} attempts")

    def _pending_error(self, why: str) -> CaptureDrainError:
        return CaptureDrainError(
            f"{self.stats.pending} captured tool executions could not be written to the trajectory store "
            f"({why}); they are still queued, fix the store and call drain() again"
        )

    def _take_buffer(self) -> list[ToolExecution]:
        """Everything buffered, now counted as in flight."""
        with self._lock:
            taken = list(self._buffer)
            self._buffer.clear()
            self._in_flight += len(taken)
        return taken

    def _take_retries(self, due_by: float | None) -> list[_Batch]:
        """The failed batches due by `due_by` (all when None), now counted as in flight."""
        with self._lock:
            taken = [batch for batch in self._retry if due_by is None or batch.due_at <= due_by]
            self._retry = [batch for batch in self._retry if not (due_by is None or batch.due_at <= due_by)]
            self._in_flight += sum(len(batch.events) for batch in taken)
        return taken

    def _write(self, batch: _Batch, now: float) -> int:
        """Write one batch already counted in flight; returns how many were written.

        A failed batch is split in halves until the good executions are written. An
        execution that fails on its own with a data error is quarantined. With any other
        error it is tried again at once (a passing error seldom strikes twice in a row);
        failing again counts one round against it, and after `quarantine_after_rounds`
        such rounds it is quarantined too. Until then, and whatever failed while the store
        looked down (nothing of the batch could be written or quarantined yet), it is
        retried after backoff.
        """
        trusted = False
        written = 0
        unresolved: list[ToolExecution] = []
        struck: set[str] = set()
        error: Exception | None = None
        groups = [batch.events]
        for second in (False, True):  # a second round once a write or quarantine shows the store is up
            while groups:
                group = groups.pop()
                failure = self._append(group)
                if failure is not None and len(group) == 1 and not isinstance(failure, DATA_ERRORS):
                    failure = self._append(group)
                if failure is None:
                    trusted = True
                    written += len(group)
                    continue
                error = failure
                if len(group) == 1:
                    if self._refused(group[0], failure, struck):
                        trusted = True  # the store took it into quarantine: it is up
                    else:
                        unresolved += group
                elif trusted or group is batch.events or isinstance(failure, DATA_ERRORS):
                    middle = len(group) // 2
                    groups += [group[middle:], group[:middle]]
                else:
                    unresolved += group
            if second or not (unresolved and trusted):
                break
            groups, unresolved = [unresolved], []
        if unresolved:
            self._retry_later(_Batch(unresolved, batch.attempts), now, error)
        return written

    def _append(self, group: list[ToolExecution]) -> Exception | None:
        """Write `group` to the store; None once it is in (and counted), else the store's error."""
        try:
            self._run_on_private_loop(self.store.append(group))
        except Exception as exc:
            return exc
        with self._lock:
            self._written += len(group)
            self._in_flight -= len(group)
        if self._lone_failures:
            for execution in group:
                self._lone_failures.pop(execution.id, None)
        self._observe_batch(len(group))
        return None

    def _run_on_private_loop(self, call: Coroutine[Any, Any, None]) -> None:
        """Run a store coroutine to completion on a private event loop: the writer thread's
        own, or one made for this call on any other thread (a flush or a drain)."""
        runner: asyncio.Runner | None = getattr(self._writer_loop, "runner", None)
        if runner is None:
            asyncio.run(call)
        else:
            runner.run(call)

    def _refused(self, execution: ToolExecution, error: Exception, struck: set[str]) -> bool:
        """Whether an execution that failed on its own is now quarantined: at once for a data
        error, after `quarantine_after_rounds` rounds (`struck` holds this round's) for any other."""
        if not isinstance(error, DATA_ERRORS):
            if execution.id not in struck:
                struck.add(execution.id)
                self._lone_failures[execution.id] = self._lone_failures.get(execution.id, 0) + 1
            if self._lone_failures[execution.id] < self.settings.quarantine_after_rounds:
                return False
        return self._quarantine(execution, error)

    def _backoff(self, attempts: int) -> float:
        """Seconds to wait after `attempts` failed tries: doubling from `retry_backoff_s`, capped."""
        return min(self.settings.retry_backoff_s * 2.0 ** (attempts - 1), self.settings.max_backoff_s)

    def _retry_later(self, batch: _Batch, now: float, error: Exception | None) -> None:
        batch.attempts += 1
        delay = self._backoff(batch.attempts)
        batch.due_at = now + delay
        with self._lock:
            self._retry.append(batch)
            self._in_flight -= len(batch.events)
            self._failed_flushes += 1
        self._log.warning(
            "capture.flush_failed", events=len(batch.events), attempt=batch.attempts,
            retry_in_s=delay, error=f"{type(error).__name__}: {error}",
        )

    def _quarantine(self, execution: ToolExecution, exc: Exception) -> bool:
        """Hand an execution the store refused to the store's quarantine, count it, and say
        so once; False if the quarantine cannot take it either (it then stays pending)."""
        reason = f"{type(exc).__name__}: {exc}"
        who = {
            "tool": storable(execution.tool_name), "session_id": storable(execution.session_id),
            "execution_id": storable(execution.id), "error": storable(reason),
        }
        try:
            self._run_on_private_loop(self.store.quarantine(execution, reason))
        except Exception as failure:
            failed = storable(f"{type(failure).__name__}: {failure}")
            self._log.warning("capture.quarantine_failed", **who, quarantine_error=failed)
            return False
        with self._lock:
            self.quarantined.append(QuarantinedExecution(execution, reason))
            self._quarantined += 1
            self._in_flight -= 1
        self._lone_failures.pop(execution.id, None)
        self._log.error("capture.quarantined", **who)
        return True

    def _observe_batch(self, size: int) -> None:
        """Report a written batch; a failing metrics sink is logged, never stops the writer."""
        metrics = TELEMETRY.metrics_for(self.metrics)
        if metrics is None:
            return
        try:
            metrics.observe(BATCH_SIZE_METRIC, float(size))
        except Exception as exc:
            self._log.warning("capture.metrics_failed", error=f"{type(exc).__name__}: {exc}")

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the background writer thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="trajectory-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poll = self.settings.poll_interval_s or min(self.settings.flush_interval_s / 4, 1.0)
        with asyncio.Runner() as self._writer_loop.runner:
            while not self._stop.is_set():
                self._wake.wait(poll)
                self._wake.clear()
                try:
                    self.tick()
                except Exception as exc:  # the writer outlives any one failure
                    self._log.error("capture.writer_failed", error=f"{type(exc).__name__}: {exc}")

    def close(self, timeout: float | None = None) -> CaptureStats:
        """Refuse new events, stop the writer, and drain everything accepted to the store.

        Returns within `timeout` seconds (default `close_timeout_s`) even if the store
        hangs, retrying a failing store with backoff meanwhile; raises `CaptureDrainError`
        saying how many executions are still pending if some could not be written.
        """
        limit = self.settings.close_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._lock:
            self._closed = True
            for session_id in list(self._sampling):
                self._set_sampling(session_id, False)
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(max(deadline - time.monotonic(), 0.0))
            self._thread = None
        drainer = threading.Thread(target=self._drain_quietly, args=(deadline,), name="trajectory-drain", daemon=True)
        drainer.start()
        drainer.join(max(deadline - time.monotonic(), 0.0))
        stats = self.stats
        self._log.info(
            "capture.closed", accepted=stats.accepted, written=stats.written, pending=stats.pending,
            quarantined=stats.quarantined, sampled_out=stats.sampled_out,
        )
        if stats.pending:
            raise CaptureDrainError(
                f"{stats.pending} captured tool executions could not be written to the trajectory store "
                f"within {limit:g} s of close(); they are still queued, fix the store and call drain() again"
            )
        return stats

    def _drain_quietly(self, deadline: float) -> None:
        """`drain` until `deadline`; what is left is reported by `close` from the stats."""
        with contextlib.suppress(CaptureDrainError):
            self.drain(timeout=max(deadline - time.monotonic(), 0.0))

    def __enter__(self) -> TrajectoryRecorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> CaptureStats:
        """A snapshot that never waits for a write in progress (those count as pending)."""
        with self._lock:
            pending = len(self._buffer) + self._in_flight + sum(len(batch.events) for batch in self._retry)
            return CaptureStats(
                self._accepted, self._written, pending, self._sampled_out, self._duplicates, self._failed_flushes,
                self._quarantined,
            )
