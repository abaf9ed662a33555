"""The database going away under a running deployment (the acceptance test of outages).

`agentloop serve` and two `agentloop worker` processes on a PostgreSQL of this module's
own (stopped and killed here, so no other test loses its server), with clients sending
messages all along: the server is stopped for 5 s and for 60 s (`pg_ctl stop -m
immediate`, then started again on the same data directory), and its postmaster is
SIGKILLed. Afterwards every message a client sent is answered exactly once and is in its
session's history once, no worker exited, `/readyz` went red and green again, and clients
were told 503 with `Retry-After` meanwhile. Each test prints how long recovery took.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import pytest

from agentloop.testing.http import ScriptedServer, completion, free_port, wait_until_healthy
from postgres_server import PostgresServer
from serve_kit import AGENTLOOP, ALICE, BOB, CAROL, HELLO, TOKENS, auth

ROOT = Path(__file__).resolve().parents[3]
CLIENTS = (ALICE, BOB, CAROL, ALICE, BOB, CAROL)
"""One client per entry, each with a session of its own, all sending at once."""
PAUSE = 0.2
"""Seconds a client waits between two messages (and before resending after a 503)."""
STALL_TIMEOUT = 3.0
REGISTERED_AGAIN_WITHIN = STALL_TIMEOUT + 25
"""Seconds after the restart by which every worker is registered again (docs/deploy.md's bound for
a worker whose turns were still in flight when the database came back)."""


class Database:
    """A pgserver PostgreSQL this module alone uses, which the tests stop, kill and start again."""

    def __init__(self, directory: Path) -> None:
        import pgserver
        from pgserver import _commands

        self._pg_ctl = _commands.pg_ctl
        self.server = pgserver.get_server(directory, cleanup_mode="delete")
        self.pgdata: Path = self.server.pgdata
        self.socket_dir = self.server.get_postmaster_info().socket_dir
        self.url = PostgresServer(self.server).new_database()
        with psycopg.connect(self.server.get_uri("postgres"), autocommit=True) as conn:
            # A commit must outlive the crash of PostgreSQL's processes, as on any real server: a
            # commit acknowledged but not yet in the WAL (synchronous_commit off) is lost by
            # `stop -m immediate` or SIGKILL. fsync may stay off: the machine itself keeps running.
            conn.execute("ALTER SYSTEM SET synchronous_commit = on")
            conn.execute("SELECT pg_reload_conf()")

    def postmaster_pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().split()[0])

    def stop_immediately(self) -> None:
        """`pg_ctl stop -m immediate`: every backend ends at once, as in a crash (recovery runs at the next start)."""
        self._pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.pgdata, user=self.server.system_user, timeout=30)

    def kill_postmaster(self) -> None:
        """SIGKILL the postmaster, then wait until its backends, orphaned, have exited too."""
        pid = self.postmaster_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _backends_of(self.pgdata) and time.monotonic() < deadline:
            time.sleep(0.1)

    def start(self) -> None:
        """`pg_ctl start` on the same data directory and socket, so the URL is the same."""
        self._pg_ctl(
            ["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log"), "start"],
            pgdata=self.pgdata, user=self.server.system_user, timeout=60,
        )

    def close(self) -> None:
        self._pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user, timeout=30)
        self.server.cleanup()


def _backends_of(pgdata: Path) -> list[int]:
    """The processes still working in `pgdata` (a server's processes run in its data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cwd").resolve() == pgdata.resolve():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@attrs.define
class Deployment:
    """Serve and two workers on `database`; the workers' stderr is kept in `logs`."""

    database: Database
    url: str
    serve: subprocess.Popen[str]
    workers: list[subprocess.Popen[str]]
    logs: Path

    def worker_log(self) -> str:
        return "".join(path.read_text() for path in sorted(self.logs.glob("worker-*.log")))

    def registered_workers(self) -> int:
        """Workers registered in procrastinate with a heartbeat fresher than the stall timeout."""
        with psycopg.connect(self.database.url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_workers WHERE last_heartbeat > now() - make_interval(secs => %s)",
                (STALL_TIMEOUT,),
            ).fetchone()
        return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    directory = Path(tempfile.mkdtemp(prefix="agentloop-outage-"))
    database = Database(directory / "pgdata")
    logs = directory / "logs"
    records = directory / "records"
    logs.mkdir()
    records.mkdir()
    (directory / "tokens.toml").write_text(TOKENS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "unit"), os.environ.get("PYTHONPATH")])),
        "AGENTLOOP_TEST_RECORDS": str(records),
        "AGENTLOOP_TEST_LATENCY": "0.02",
    }
    port = free_port()
    workers: list[subprocess.Popen[str]] = []
    with ScriptedServer() as model:
        model.reply(body=completion(HELLO))
        serve = subprocess.Popen(
            [*AGENTLOOP, "serve", "--stores", database.url, "--bot", "helper", "--tokens", "tokens.toml",
             "--base-url", model.url, "--model", "tiny", "--port", str(port), "--rate-limit", "100000", "--burst", "1000"],
            cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=(logs / "serve.log").open("w"), text=True,
        )
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}", serve)
            for number in range(2):
                workers.append(subprocess.Popen(
                    [*AGENTLOOP, "worker", "--stores", database.url, "--bot", "helper", "--pipeline", "tests.unit.worker_bot:factory",
                     "--concurrency", "4", "--stall-timeout", str(STALL_TIMEOUT)],
                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=(logs / f"worker-{number}.log").open("w"), text=True,
                ))
            for worker in workers:
                assert worker.stdout is not None and f"agentloop worker {worker.pid}" in worker.stdout.readline()
            yield Deployment(database, f"http://127.0.0.1:{port}", serve, workers, logs)
        finally:
            for process in (serve, *workers):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in (serve, *workers):
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
            database.close()


@attrs.define
class Traffic:
    """What the clients saw: each session's messages in order, every answer, every 503's Retry-After."""

    sent: dict[str, list[str]] = attrs.Factory(dict)
    answers: Counter[str] = attrs.Factory(Counter)
    retry_afters: list[str | None] = attrs.Factory(list)
    unexpected: list[str] = attrs.Factory(list)
    answered_at: list[float] = attrs.Factory(list)


async def _client(url: str, token: str, traffic: Traffic, stop: threading.Event) -> None:
    """Send messages in a session of `token`'s until `stop`, each resent (same message_id) until it is answered."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        session = (await http.post("/v1/sessions", headers=auth(token))).json()["session_id"]
        texts = traffic.sent.setdefault(session, [])
        while not stop.is_set():
            text, message_id = f"{session[:8]}-m{len(texts)}", uuid.uuid4().hex
            texts.append(text)
            while True:
                try:
                    reply = await http.post(f"/v1/sessions/{session}/messages", json={"text": text, "message_id": message_id}, headers=auth(token))
                except httpx.TransportError as error:
                    traffic.unexpected.append(f"{text}: {error!r}")
                    await asyncio.sleep(PAUSE)
                    continue
                if reply.status_code == 503:
                    traffic.retry_afters.append(reply.headers.get("retry-after"))
                    assert reply.json()["error"]["code"] == "unavailable"
                    await asyncio.sleep(PAUSE)
                    continue
                if reply.status_code != 200:
                    traffic.unexpected.append(f"{text}: {reply.status_code} {reply.text[:300]}")
                    await asyncio.sleep(PAUSE)
                    continue
                outcome = reply.json()  # answered: resending the same message_id would get this same outcome
                if outcome["finish_reason"] != "success" or outcome["fallback"]:
                    traffic.unexpected.append(f"{text}: {outcome['finish_reason']} {outcome['failures']}")
                traffic.answers[f"{session}:{outcome['text']}"] += 1
                traffic.answered_at.append(time.monotonic())
                break
            await asyncio.sleep(PAUSE)


def _readiness(url: str, stop: threading.Event, seen: list[tuple[float, int]]) -> None:
    """Poll /readyz every tenth of a second until `stop`, keeping (when, status)."""
    with httpx.Client(base_url=url, timeout=10) as http:
        while not stop.is_set():
            seen.append((time.monotonic(), http.get("/readyz").status_code))
            time.sleep(0.1)


def _run_outage(deployment: Deployment, outage: str, down_for: float) -> tuple[Traffic, list[tuple[float, int]], float]:
    """Clients sending all along; the database taken away by `outage` for `down_for` seconds, then
    started again; the clients stop sending a few seconds after and every message is answered.
    Returns the traffic, the /readyz timeline and when the database was started again."""
    traffic, ready = Traffic(), []
    stop_clients, stop_ready = threading.Event(), threading.Event()

    def clients() -> None:
        async def all_of_them() -> None:
            await asyncio.gather(*(_client(deployment.url, token, traffic, stop_clients) for token in CLIENTS))

        asyncio.run(all_of_them())

    sending = threading.Thread(target=clients, daemon=True)
    polling = threading.Thread(target=_readiness, args=(deployment.url, stop_ready, ready), daemon=True)
    sending.start()
    polling.start()
    try:
        flowing = time.monotonic() + 60  # on a busy machine the first answers can take a while
        while not traffic.answers and time.monotonic() < flowing:
            time.sleep(0.1)
        assert traffic.answers, f"no answer before the outage: {traffic.unexpected[:3]}"
        time.sleep(1.0)  # messages flowing
        if outage == "kill":
            deployment.database.kill_postmaster()
        else:
            deployment.database.stop_immediately()
        time.sleep(down_for)
        deployment.database.start()
        restarted = time.monotonic()
        while not [at for at in traffic.answered_at if at > restarted] and time.monotonic() < restarted + 60:
            time.sleep(0.1)
        time.sleep(3.0)  # messages flowing again
    finally:
        stop_clients.set()
        sending.join(timeout=120)
        time.sleep(0.5)
        stop_ready.set()
        polling.join()
    return traffic, ready, restarted


def _check(deployment: Deployment, traffic: Traffic, ready: list[tuple[float, int]], restarted: float, title: str) -> None:
    answered_again = min(at for at in traffic.answered_at if at > restarted) - restarted
    green_again = min((at for at, status in ready if at > restarted and status == 200), default=float("inf")) - restarted
    print(f"\n{title}: /readyz green {green_again:.1f} s and the first new answer {answered_again:.1f} s after the database started again")

    assert [worker.poll() for worker in deployment.workers] == [None, None]  # no worker exited
    assert deployment.serve.poll() is None
    deadline = max(time.monotonic() + 2 * STALL_TIMEOUT, restarted + REGISTERED_AGAIN_WITHIN)
    while deployment.registered_workers() < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert deployment.registered_workers() == 2  # both registered again and heartbeating
    statuses = [status for _, status in ready]
    assert 503 in statuses and statuses[-1] == 200  # red, then green again
    assert traffic.retry_afters and all(value is not None and value.isdigit() for value in traffic.retry_afters)
    every = [f"{session}:echo: {text}" for session, texts in traffic.sent.items() for text in texts]
    sent = Counter(record["text"] for record in _records(deployment) if record["event"] == "sent")
    assert [text for text, count in sent.items() if count > 1] == []  # no reply delivered twice
    assert traffic.unexpected == []  # every turn succeeded: none reported a store failure as an answer
    assert traffic.answers == Counter(every)  # every message answered, once each
    with httpx.Client(base_url=deployment.url) as http:
        for session, texts in traffic.sent.items():
            token = next(token for token in (ALICE, BOB, CAROL) if http.get(f"/v1/sessions/{session}/messages", headers=auth(token)).status_code == 200)
            history = [m["text"] for m in http.get(f"/v1/sessions/{session}/messages", headers=auth(token)).json()["messages"]]
            assert history == [line for text in texts for line in (text, f"echo: {text}")], f"history of {session}"


def _records(deployment: Deployment) -> list[dict[str, Any]]:
    records = deployment.logs.parent / "records"
    return [json.loads(line) for path in records.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_a_5s_stop_of_the_database_loses_no_message_and_no_worker(deployment: Deployment) -> None:
    traffic, ready, restarted = _run_outage(deployment, "stop", 5.0)
    _check(deployment, traffic, ready, restarted, "5 s stop")


def test_a_60s_stop_of_the_database_loses_no_message_and_no_worker(deployment: Deployment) -> None:
    traffic, ready, restarted = _run_outage(deployment, "stop", 60.0)
    _check(deployment, traffic, ready, restarted, "60 s stop")
    log = deployment.worker_log()
    assert "worker.database_lost" in log and "worker.database_back" in log
    assert "Traceback" not in log


def test_a_sigkilled_postmaster_loses_no_message_and_no_worker(deployment: Deployment) -> None:
    traffic, ready, restarted = _run_outage(deployment, "kill", 5.0)
    _check(deployment, traffic, ready, restarted, "postmaster SIGKILL")
