"""TrajectoryRecorder: non-blocking enqueue, batches, retries, sampling, drain (I12)."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from structlog.testing import capture_logs

from agentloop.adapters import InMemoryMetrics, open_stores
from agentloop.components import ToolExecution
from agentloop.notes.errors import CaptureDrainError, RecorderClosedError
from agentloop.notes import CaptureSettings, TrajectoryRecorder, capture
from agentloop.ports import TrajectoryStore
from agentloop.testing import FakeClock
from agentloop.testing.notes import FlakyTrajectoryStore, make_execution


def _wait_for(predicate: object, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TrajectoryStore]:
    with open_stores(tmp_path) as stores:
        yield stores.trajectories


def test_enqueue_only_buffers_until_a_flush(store: TrajectoryStore) -> None:
    recorder = TrajectoryRecorder(store, clock=FakeClock())
    assert recorder.enqueue(make_execution("read_file"))
    assert asyncio.run(store.count()) == 0
    assert recorder.stats.pending == 1
    assert recorder.flush() == 1
    assert asyncio.run(store.count()) == 1


def test_a_full_batch_wakes_the_background_writer(store: TrajectoryStore) -> None:
    metrics = InMemoryMetrics()
    recorder = TrajectoryRecorder(store, settings=CaptureSettings(batch_size=10, flush_interval_s=3600), metrics=metrics)
    recorder.start()
    try:
        for _ in range(9):
            recorder.enqueue(make_execution())
        time.sleep(0.05)
        assert asyncio.run(store.count()) == 0
        recorder.enqueue(make_execution())
        assert _wait_for(lambda: asyncio.run(store.count()) == 10)
        # the writer reports the batch just after the store took it
        assert _wait_for(lambda: metrics.observations("note_taking.capture.batch_size") == [10.0])
        for _ in range(10):  # and the next full batch wakes it again
            recorder.enqueue(make_execution())
        assert _wait_for(lambda: asyncio.run(store.count()) == 20)
    finally:
        recorder.close()


def test_the_interval_flushes_a_partial_batch_on_the_injected_clock(store: TrajectoryStore) -> None:
    clock = FakeClock()
    recorder = TrajectoryRecorder(store, clock=clock)
    for _ in range(3):
        recorder.enqueue(make_execution())
    assert recorder.tick() == 0
    clock.advance(4.9)
    assert recorder.tick() == 0
    clock.advance(0.1)
    assert recorder.tick() == 3
    assert asyncio.run(store.count()) == 3


def test_the_interval_flushes_in_real_time_too(store: TrajectoryStore) -> None:
    recorder = TrajectoryRecorder(store, settings=CaptureSettings(flush_interval_s=0.05))
    with recorder:
        recorder.enqueue(make_execution())
        recorder.enqueue(make_execution())
        assert _wait_for(lambda: asyncio.run(store.count()) == 2, timeout=2.0)


def test_a_failed_flush_is_retried_after_backoff(store: TrajectoryStore) -> None:
    clock = FakeClock()
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=clock, settings=CaptureSettings(retry_backoff_s=0.5))
    for _ in range(4):
        recorder.enqueue(make_execution())
    flaky.failing = True
    with capture_logs() as logs:
        assert recorder.flush() == 0
    assert any(entry["event"] == "capture.flush_failed" for entry in logs)
    assert recorder.stats.pending == 4 and recorder.stats.failed_flushes == 1
    attempts = flaky.failures
    clock.advance(0.4)
    assert recorder.tick() == 0 and flaky.failures == attempts  # not due yet: no attempt
    clock.advance(0.1)
    assert recorder.tick() == 0 and flaky.failures > attempts  # still down: backoff doubles to 1 s
    flaky.failing = False
    clock.advance(0.9)
    assert recorder.tick() == 0
    clock.advance(0.1)
    assert recorder.tick() == 4
    assert asyncio.run(store.count()) == 4 and recorder.stats.pending == 0 and recorder.stats.quarantined == 0


def test_a_write_that_fails_once_is_split_and_written_in_the_same_flush(store: TrajectoryStore) -> None:
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    for _ in range(4):
        recorder.enqueue(make_execution())
    flaky.fail_next = 1
    assert recorder.flush() == 4
    assert asyncio.run(store.count()) == 4 and recorder.stats.quarantined == 0


def test_close_drains_everything_and_refuses_later_events(store: TrajectoryStore) -> None:
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    recorder.start()
    flaky.fail_next = 1
    for _ in range(5):
        recorder.enqueue(make_execution())
    recorder.flush()
    recorder.enqueue(make_execution())
    recorder.close()
    assert asyncio.run(store.count()) == 6
    with pytest.raises(RecorderClosedError, match="after the trajectory recorder was closed"):
        recorder.enqueue(make_execution())


def test_a_store_that_stays_down_at_shutdown_is_reported_not_hidden(store: TrajectoryStore) -> None:
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock(), settings=CaptureSettings(retry_backoff_s=0.02))
    for _ in range(3):
        recorder.enqueue(make_execution())
    flaky.failing = True
    started = time.monotonic()
    with pytest.raises(CaptureDrainError, match=r"3 captured tool executions could not be written .* within 0.3 s"):
        recorder.close(timeout=0.3)
    assert time.monotonic() - started < 1.0
    assert flaky.failures > 3  # retried with backoff while the close timeout lasted
    assert recorder.stats.pending == 3 and recorder.stats.quarantined == 0
    flaky.failing = False
    recorder.drain()
    assert asyncio.run(store.count()) == 3 and recorder.stats.pending == 0


def test_a_bot_closing_capture_from_its_event_loop_gets_every_execution_written(store: TrajectoryStore) -> None:
    recorder = TrajectoryRecorder(store, settings=CaptureSettings(batch_size=10))
    recorder.start()

    async def bot() -> None:
        for _ in range(12):
            recorder.enqueue(make_execution())
        assert _wait_for(lambda: recorder.stats.written >= 10)  # the writer has written a batch
        recorder.close()

    asyncio.run(bot())
    assert asyncio.run(store.count()) == 12


def test_the_same_execution_is_captured_once(store: TrajectoryStore) -> None:
    recorder = TrajectoryRecorder(store, clock=FakeClock())
    execution = make_execution()
    assert recorder.enqueue(execution)
    assert not recorder.enqueue(execution)
    recorder.flush()
    assert asyncio.run(store.count()) == 1 and recorder.stats.duplicates == 1


def test_sampling_starts_above_the_rate_and_keeps_every_failure(store: TrajectoryStore) -> None:
    clock = FakeClock()
    recorder = TrajectoryRecorder(store, clock=clock, rng=random.Random(7))
    with capture_logs() as logs:
        for _ in range(100):
            assert recorder.enqueue(make_execution(session_id="busy"))
            clock.advance(0.5)
        assert not recorder.sampling_active("busy")
        kept_ok = sum(recorder.enqueue(make_execution(session_id="busy")) for _ in range(1000))
        kept_failed = sum(recorder.enqueue(make_execution(session_id="busy", error="boom")) for _ in range(50))
        assert recorder.enqueue(make_execution(session_id="calm"))
    assert recorder.sampling_active("busy") and not recorder.sampling_active("calm")
    assert 60 <= kept_ok <= 140
    assert kept_failed == 50
    assert recorder.stats.sampled_out == 1000 - kept_ok
    assert {"event": "capture.sampling", "session_id": "busy", "active": True} in [
        {k: entry[k] for k in ("event", "session_id", "active")} for entry in logs if entry["event"] == "capture.sampling"
    ]
    clock.advance(61)
    assert recorder.enqueue(make_execution(session_id="busy"))
    assert not recorder.sampling_active("busy")


def test_rate_windows_of_idle_sessions_are_dropped(store: TrajectoryStore) -> None:
    clock = FakeClock()
    recorder = TrajectoryRecorder(store, clock=clock)
    for number in range(1000):
        assert recorder.enqueue(make_execution(session_id=f"s{number}"))
        clock.advance(1.0)
        assert len(recorder._windows) <= 60
    assert list(recorder._windows)[-1] == "s999" and "s0" not in recorder._windows


class GatedStore:
    """A real store whose `append` waits for `release` while `gated`, to look at the
    recorder mid-write."""

    def __init__(self, inner: TrajectoryStore) -> None:
        self.inner = inner
        self.gated = False
        self.entered = threading.Event()
        self.release = threading.Event()

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        if self.gated:
            self.entered.set()
            assert self.release.wait(5.0)
        await self.inner.append(executions)


def test_stats_count_batches_taken_for_writing_as_pending(store: TrajectoryStore) -> None:
    gated = GatedStore(store)
    flaky = FlakyTrajectoryStore(gated)  # type: ignore[arg-type]
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    flaky.failing = True
    for _ in range(2):  # two failed batches wait in the retry queue
        recorder.enqueue(make_execution(session_id="s1"))
        recorder.enqueue(make_execution(session_id="s1"))
        recorder.flush()
    flaky.failing = False
    gated.gated = True
    drain = threading.Thread(target=recorder.drain)
    drain.start()
    assert gated.entered.wait(5.0)
    mid_write = recorder.stats
    gated.release.set()
    drain.join()
    assert (mid_write.accepted, mid_write.written, mid_write.pending) == (4, 0, 4)
    final = recorder.stats
    assert (final.accepted, final.written, final.pending) == (4, 4, 0)


class RefusingStore(FlakyTrajectoryStore):
    """A real store that refuses, with an error that does not blame the execution, any
    batch holding one poisoned id."""

    def __init__(self, inner: TrajectoryStore, poisoned: str) -> None:
        super().__init__(inner)
        self.poisoned = poisoned

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        if any(e.id == self.poisoned for e in executions):
            self.calls += 1
            raise OSError("disk I/O error")
        await super().append(executions)


def test_an_execution_that_keeps_failing_alone_on_a_store_error_is_quarantined_after_some_rounds_not_retried_forever(
    store: TrajectoryStore,
) -> None:
    clock = FakeClock()
    executions = [make_execution(session_id="s1") for _ in range(10)]
    refusing = RefusingStore(store, poisoned=executions[7].id)
    recorder = TrajectoryRecorder(refusing, clock=clock, settings=CaptureSettings(quarantine_after_rounds=3))
    for execution in executions:
        recorder.enqueue(execution)
    assert recorder.flush() == 9
    assert refusing.calls <= 2 * 10  # a bisection, not one write per event per retry
    assert (recorder.stats.pending, recorder.stats.quarantined) == (1, 0)  # the error may pass: retried first
    for _ in range(2):
        clock.advance(60)
        assert recorder.tick() == 0
    assert [q.execution.id for q in recorder.quarantined] == [executions[7].id]
    assert [row["id"] for row in asyncio.run(store.quarantined())] == [executions[7].id]
    more = make_execution(session_id="s1")
    recorder.enqueue(more)
    assert recorder.flush() == 1 and asyncio.run(store.count()) == 10
    assert recorder.close().pending == 0


def test_a_store_that_fails_every_other_write_quarantines_no_good_execution(store: TrajectoryStore) -> None:
    flaky = FlakyTrajectoryStore(store)
    flaky.fail_every = 2  # busy on every other call: another process holds the write lock now and then
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    for _ in range(10):
        recorder.enqueue(make_execution(session_id="s1"))
    assert recorder.flush() == 10
    assert asyncio.run(store.count()) == 10 and recorder.stats.quarantined == 0 and asyncio.run(store.quarantined()) == []


@pytest.mark.parametrize("every", [2, 3])
def test_an_intermittent_store_quarantines_a_batch_it_cannot_take_in_one_flush(
    store: TrajectoryStore, every: int
) -> None:
    """A quarantine the store takes shows it is up, so what failed beside it is split
    and settled now, not left to backoff rounds that outlast the close timeout."""
    flaky = FlakyTrajectoryStore(store)
    flaky.fail_every = every
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    bad = [make_execution(session_id="s1", error="bad \udcff") for _ in range(24)]
    for execution in bad:
        recorder.enqueue(execution)
    assert recorder.flush() == 0
    assert (recorder.stats.pending, recorder.stats.quarantined, recorder.stats.failed_flushes) == (0, 24, 0)
    assert {row["id"] for row in asyncio.run(store.quarantined())} == {e.id for e in bad}


class GoesDown(FlakyTrajectoryStore):
    """Fails the first write, takes the second, then is down (writes and quarantine alike)
    until `failing` is cleared: the disk went away in the middle of a batch."""

    def __init__(self, inner: TrajectoryStore) -> None:
        super().__init__(inner)
        self.fail_next = 1

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        if self.calls == 2:
            self.failing = True
        await super().append(executions)


def test_executions_that_failed_while_the_store_went_down_mid_batch_stay_pending_and_are_written_later(
    store: TrajectoryStore,
) -> None:
    flaky = GoesDown(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock(), settings=CaptureSettings(retry_backoff_s=0.01))
    for _ in range(10):
        recorder.enqueue(make_execution(session_id="s1"))
    assert recorder.flush() == 5
    assert (recorder.stats.pending, recorder.stats.quarantined) == (5, 0)
    flaky.failing = False
    stats = recorder.close(timeout=5.0)
    assert (stats.written, stats.quarantined, stats.pending) == (10, 0, 0) and asyncio.run(store.count()) == 10


def test_an_execution_whose_quarantine_fails_stays_pending_until_the_store_keeps_it(
    store: TrajectoryStore,
) -> None:
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock())
    bad = make_execution("list_dir", session_id="s1", result="report-\udcff.txt")
    recorder.enqueue(bad)

    def quarantine_is_down(execution: ToolExecution, reason: str) -> None:
        raise OSError("disk I/O error")

    flaky.quarantine = quarantine_is_down  # type: ignore[method-assign]
    with capture_logs() as logs:
        recorder.flush()
    assert (recorder.stats.pending, recorder.stats.quarantined) == (1, 0) and list(recorder.quarantined) == []
    assert [e["event"] for e in logs if e["event"].startswith("capture.quarantine")] == ["capture.quarantine_failed"]
    with pytest.raises(CaptureDrainError, match="1 captured tool executions could not be written"):
        recorder.drain()
    del flaky.quarantine
    recorder.drain()
    assert (recorder.stats.pending, recorder.stats.quarantined) == (0, 1)
    assert [row["id"] for row in asyncio.run(store.quarantined())] == [bad.id]


def test_an_execution_too_large_for_the_store_is_quarantined_at_once_and_kept_cut(
    store: TrajectoryStore,
) -> None:
    store.engine._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)  # stands in for SQLite's 1 GB cap
    recorder = TrajectoryRecorder(store, clock=FakeClock())
    big = make_execution(session_id="s1", arguments={"blob": "x" * 200_000})
    small = make_execution(session_id="s1")
    recorder.enqueue(big)
    assert recorder.flush() == 0
    assert (recorder.stats.pending, recorder.stats.quarantined) == (0, 1)
    assert "ExecutionRefusedError" in recorder.quarantined[0].reason
    (kept,) = asyncio.run(store.quarantined())
    assert kept["id"] == big.id and kept["execution"].endswith("characters]") and "[cut: " in kept["execution"]
    recorder.enqueue(small)
    assert recorder.close(timeout=1.0).written == 1


def test_recorder_keeps_only_the_most_recent_quarantined_executions_in_memory(
    store: TrajectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capture, "QUARANTINE_MEMORY", 3)
    recorder = TrajectoryRecorder(store, clock=FakeClock())
    bad = [make_execution(session_id="s1", error=f"bad {n} \udcff") for n in range(5)]
    for execution in bad:
        recorder.enqueue(execution)
    recorder.flush()
    assert [q.execution.id for q in recorder.quarantined] == [e.id for e in bad[2:]]
    assert recorder.stats.quarantined == 5 and len(asyncio.run(store.quarantined())) == 5


def test_enqueue_from_eight_threads_counts_every_event_exactly(tmp_path: Path) -> None:
    stores = open_stores(tmp_path)
    store = stores.trajectories
    recorder = TrajectoryRecorder(store, settings=CaptureSettings(batch_size=500, flush_interval_s=0.05))
    per_thread = 20_000
    accepted = [0] * 8

    def run(number: int) -> None:
        for index in range(per_thread):
            unstorable = index % 5000 == 0  # a failed run (never sampled out) the store refuses
            execution = make_execution(
                session_id=f"s{number}", execution_id=f"{number}-{index}",
                error="bad \udcff" if unstorable else None,
            )
            accepted[number] += recorder.enqueue(execution)

    recorder.start()
    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = recorder.close(timeout=5.0)
    assert 8 * per_thread == stats.written + stats.quarantined + stats.sampled_out
    assert stats.accepted == sum(accepted) == stats.written + stats.quarantined and stats.pending == 0
    assert stats.quarantined == 8 * 4 and stats.sampled_out > 0 and stats.duplicates == 0
    assert asyncio.run(store.count()) == stats.written
    stores.close()


class BrokenMetrics(InMemoryMetrics):
    def observe(self, name: str, value: float, labels: dict[str, str] | None = None) -> None:
        raise RuntimeError("metrics backend is down")


def test_a_failing_metrics_sink_never_stops_the_writer(store: TrajectoryStore) -> None:
    recorder = TrajectoryRecorder(store, settings=CaptureSettings(batch_size=2, flush_interval_s=3600),
                                  metrics=BrokenMetrics())
    with recorder:
        for expected in (2, 4):
            recorder.enqueue(make_execution())
            recorder.enqueue(make_execution())
            assert _wait_for(lambda: asyncio.run(store.count()) == expected)  # noqa: B023
    assert recorder.stats.written == 4


def test_drain_at_close_retries_with_backoff_until_the_store_recovers(store: TrajectoryStore) -> None:
    flaky = FlakyTrajectoryStore(store)
    recorder = TrajectoryRecorder(flaky, clock=FakeClock(), settings=CaptureSettings(retry_backoff_s=0.01, drain_attempts=1))
    for _ in range(3):
        recorder.enqueue(make_execution())
    flaky.fail_next = 8  # more failures than one round of bisection makes
    stats = recorder.close(timeout=5.0)
    assert stats.written == 3 and asyncio.run(store.count()) == 3 and flaky.failures == 8


def test_close_returns_within_its_timeout_on_a_store_that_hangs_and_loses_nothing(store: TrajectoryStore) -> None:
    gated = GatedStore(store)
    recorder = TrajectoryRecorder(gated, settings=CaptureSettings(batch_size=2, flush_interval_s=3600))  # type: ignore[arg-type]
    recorder.start()
    gated.gated = True
    recorder.enqueue(make_execution())
    recorder.enqueue(make_execution())
    assert gated.entered.wait(5.0)  # the writer is stuck inside the store
    recorder.enqueue(make_execution())
    started = time.monotonic()
    with pytest.raises(CaptureDrainError, match="3 captured tool executions could not be written .* within 0.2 s"):
        recorder.close(timeout=0.2)
    assert time.monotonic() - started < 0.5
    gated.gated = False
    gated.release.set()
    recorder.drain()
    assert asyncio.run(store.count()) == 3 and recorder.stats.pending == 0


class CaptureMachine(RuleBasedStateMachine):
    """I12: whatever flush failures happen (a store down for a while, or failing every
    few writes), after a clean shutdown the store holds every accepted event but those it
    cannot take, which are quarantined on their own and kept in the store; a good event is
    never quarantined; sampled-out events are counted, never silently dropped."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        self.stores = open_stores(self._dir.name)
        self.store = self.stores.trajectories
        self.flaky = FlakyTrajectoryStore(self.store)
        self.clock = FakeClock()
        self.recorder = TrajectoryRecorder(
            self.flaky, clock=self.clock, rng=random.Random(0),
            settings=CaptureSettings(
                batch_size=4, sampling_threshold_per_minute=6, sampling_rate=0.5, close_timeout_s=3.0
            ),
        )
        self.accepted: set[str] = set()
        self.unstorable: set[str] = set()
        self.offered = 0
        self.closed = False

    @precondition(lambda self: not self.closed)
    @rule(session=st.sampled_from(["a", "b"]), failed=st.booleans(), gap=st.sampled_from([0.0, 1.0, 30.0]))
    def enqueue(self, session: str, failed: bool, gap: float) -> None:
        self.clock.advance(gap)
        execution = make_execution(session_id=session, error="boom" if failed else None)
        self.offered += 1
        if self.recorder.enqueue(execution):
            self.accepted.add(execution.id)
        elif failed:
            raise AssertionError("a failed execution was sampled out")

    @rule(failing=st.booleans())
    def store_health(self, failing: bool) -> None:
        self.flaky.failing = failing

    @rule(every=st.sampled_from([0, 2, 3]))
    def store_intermittent(self, every: int) -> None:
        """The store refuses every `every`-th write with an error that does not blame the events."""
        self.flaky.fail_every = every

    @precondition(lambda self: not self.closed)
    @rule(seconds=st.sampled_from([0.1, 1.0, 6.0]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.recorder.tick()

    @precondition(lambda self: not self.closed)
    @rule()
    def flush(self) -> None:
        self.recorder.flush()

    @precondition(lambda self: not self.closed)
    @rule()
    def clean_shutdown(self) -> None:
        self.flaky.failing = False
        self.recorder.close()
        self.closed = True
        self._check_shutdown()

    @precondition(lambda self: not self.closed)
    @rule(session=st.sampled_from(["a", "b"]))
    def enqueue_unstorable(self, session: str) -> None:
        """An execution the store cannot take (it skipped the boundary that makes text storable)."""
        execution = make_execution(session_id=session, error="bad bytes \udcff")
        self.offered += 1
        assert self.recorder.enqueue(execution)
        self.accepted.add(execution.id)
        self.unstorable.add(execution.id)

    @invariant()
    def nothing_is_lost(self) -> None:
        stats = self.recorder.stats
        assert stats.accepted == len(self.accepted) == stats.written + stats.quarantined + stats.pending
        assert stats.accepted + stats.sampled_out + stats.duplicates == self.offered
        assert stats.written == asyncio.run(self.store.count())
        quarantined = {q.execution.id for q in self.recorder.quarantined}
        assert quarantined <= self.unstorable and len(quarantined) == stats.quarantined
        assert {row["id"] for row in asyncio.run(self.store.quarantined())} == quarantined

    def _stored_ids(self) -> set[str]:
        return {e.id for s in ("a", "b") for e in asyncio.run(self.store.load(s)).executions}

    def _check_shutdown(self) -> None:
        assert self._stored_ids() == self.accepted - self.unstorable
        assert {q.execution.id for q in self.recorder.quarantined} == self.unstorable

    def teardown(self) -> None:
        if not self.closed:
            self.flaky.failing = False
            self.recorder.close()
            self._check_shutdown()
        self.stores.close()
        self._dir.cleanup()


TestCaptureMachine = CaptureMachine.TestCase
TestCaptureMachine.settings = settings(deadline=None, max_examples=40, stateful_step_count=40)


def test_capture_machine_replays_the_failing_run_hypothesis_found() -> None:
    """I12: 24 executions the store cannot take, then a close on a store that refuses
    every other write, quarantines them all within the close timeout. The steps, one
    character each: a session name enqueues an unstorable execution there, a digit sets
    `store_intermittent(every=digit)`."""
    machine = CaptureMachine()
    machine.nothing_is_lost()
    for step in "aa0aaaaaaaaa20ba3baa002033aa0bbb2bb02b":
        if step.isdigit():
            machine.store_intermittent(every=int(step))
        else:
            machine.enqueue_unstorable(session=step)
        machine.nothing_is_lost()
    machine.teardown()
    assert (machine.recorder.stats.quarantined, machine.recorder.stats.failed_flushes) == (24, 0)
