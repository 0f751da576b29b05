"""An ASGI app (FastAPI) served by uvicorn in a background thread on a free local port, for tests that need a
real HTTP endpoint in-process (stub retrieval servers, a small OpenAI-compatible server)."""

from __future__ import annotations

import threading
import time

from agent_system.environments.env_package.search.local_server import free_port


class ThreadedServer:
    """``with ThreadedServer(app) as server: server.base_url`` -> "http://127.0.0.1:<port>"."""

    def __init__(self, app, log_level: str = "warning", startup_timeout_s: float = 30.0):
        import uvicorn

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level=log_level))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the test server on port {self.port} did not start within {startup_timeout_s} s")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> "ThreadedServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
