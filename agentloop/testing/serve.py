"""`served(app)`: an ASGI app on a real uvicorn server on a free loopback port, for end-to-end tests.

Imported separately: it needs the `serve` extra (uvicorn).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def served(app: Any, *, startup_timeout: float = 30.0) -> Iterator[str]:
    """Run `app` (its lifespan included) on 127.0.0.1 in a background thread; yields its base URL.

    On exit the server stops as on SIGTERM: requests in flight finish, then the lifespan closes.
    A lifespan that fails to start raises `RuntimeError` here instead of hanging the test.
    """
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="agentloop-served", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(startup_timeout)
            raise RuntimeError("the app did not start; its lifespan failed (see the log) or took too long")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(startup_timeout)
