"""Start the retrieval server as a child process on 127.0.0.1 and wait until it answers (tests, the
built-in data set, benchmarks)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRetrievalServer:
    """``with LocalRetrievalServer(corpus) as server: server.url`` -> "http://127.0.0.1:<port>/retrieve"."""

    def __init__(self, corpus_path: str, retriever: str = "bm25", extra_args: tuple[str, ...] = (), startup_timeout_s: float = 60.0):
        self.port = free_port()
        cmd = [sys.executable, "-m", "agent_system.environments.env_package.search.retrieval_server",
               "--corpus", corpus_path, "--retriever", retriever, "--port", str(self.port), *extra_args]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}/retrieve"
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"retrieval server exited with {self._proc.returncode}: {self._proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"retrieval server did not answer within {startup_timeout_s} s")

    def is_running(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> "LocalRetrievalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
