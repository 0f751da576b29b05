"""A stub OpenAI-compatible chat endpoint (``POST .../chat/completions``) whose replies can be faults: for tests of
the prompt-only engine against passing and persistent endpoint faults. A raw ASGI app, served in-process by
``ThreadedServer``, so that it can also cut a transfer short.

Faults: ``500``, ``502_html`` (a proxy's HTML error page), ``503``, ``429`` (with ``Retry-After``), ``401``,
``timeout`` (answers after ``slow_s``), ``cut`` (the connection closes in the middle of the body), and the
malformed 200 replies ``truncated`` (JSON cut off), ``html`` (an HTML page), ``empty`` (no choices) and
``no_message``; ``garbage`` is a well-formed reply whose text holds no action. ``ok`` answers ``<action>+`` with
``stop_reason`` naming the stop string, as vLLM does."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from typing import Callable

TRANSIENT = ("500", "502_html", "503", "429", "timeout", "cut")
MALFORMED = ("truncated", "html", "empty", "no_message")


def completion(content: str | None = "<action>+", choices: list | None = None) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
              "stop_reason": "</action>"}
    return {"id": "stub", "object": "chat.completion", "created": 0, "model": "stub",
            "choices": [choice] if choices is None else choices,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


class ChatStub:
    """``ChatStub(plan)``: ``plan()`` names the fault of each request (``"ok"`` for none). ``sent`` counts what
    was answered, ``times`` holds each request's arrival (``time.monotonic``), ``bodies`` each request's JSON
    body and ``headers`` its headers (lower-case names; in arrival order)."""

    def __init__(self, plan: Callable[[], str], retry_after: str = "0.01", slow_s: float = 1.0):
        self.plan = plan
        self.retry_after = retry_after
        self.slow_s = slow_s
        self.sent: Counter[str] = Counter()
        self.times: list[float] = []
        self.bodies: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()

    @classmethod
    def sequence(cls, faults: list[str], **kwargs) -> "ChatStub":
        """The faults in order, then ``ok`` for every later request."""
        queue = list(faults)
        return cls(lambda: queue.pop(0) if queue else "ok", **kwargs)

    @classmethod
    def failing_share(cls, share: float, seed: int, faults: tuple[str, ...] = TRANSIENT, **kwargs) -> "ChatStub":
        """Each request meets one of ``faults`` (uniformly) with probability ``share``, else ``ok``."""
        rng = random.Random(seed)
        return cls(lambda: rng.choice(faults) if rng.random() < share else "ok", **kwargs)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            event = await receive()
            body, more = body + event.get("body", b""), event.get("more_body", False)
        with self._lock:
            fault = self.plan()
            self.sent[fault] += 1
            self.times.append(time.monotonic())
            self.bodies.append(json.loads(body))
            self.headers.append({k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        await self._answer(fault, send)

    async def _answer(self, fault: str, send) -> None:
        if fault == "timeout":
            await asyncio.sleep(self.slow_s)
            fault = "ok"
        if fault == "cut":
            body = json.dumps(completion()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body[:20], "more_body": True})
            raise ConnectionAbortedError("the stub cuts this transfer")  # uvicorn closes the connection
        status, body, kind, headers = 200, json.dumps(completion()).encode(), b"application/json", []
        if fault in ("500", "503", "401"):
            status, body = int(fault), json.dumps({"error": {"message": f"stub fault {fault}"}}).encode()
        elif fault == "429":
            status, body = 429, json.dumps({"error": {"message": "slow down"}}).encode()
            headers = [(b"retry-after", self.retry_after.encode())]
        elif fault == "502_html":
            status, body, kind = 502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", b"text/html"
        elif fault == "garbage":
            body = json.dumps(completion("~~ 0xDEADBEEF lorem ipsum ~~")).encode()
        elif fault == "html":
            body, kind = b"<html><body>Please log in</body></html>", b"text/html"
        elif fault == "truncated":
            body = body[: len(body) // 2]
        elif fault == "empty":
            body = json.dumps(completion(choices=[])).encode()
        elif fault == "no_message":
            body = json.dumps(completion(choices=[{"index": 0, "finish_reason": "stop"}])).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})
