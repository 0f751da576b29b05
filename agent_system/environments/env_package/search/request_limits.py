"""The retrieval server's request limits: body size (HTTP 413), queries per request, ``topk`` and results per
answer (HTTP 400), and every malformed request answered 400 with a one-line message (never 500)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


class LimitExceeded(ValueError):
    """A request asks for more than the server's limits allow (answered HTTP 400 with this message)."""


@dataclass(frozen=True)
class ServerLimits:
    """What one ``POST /retrieve`` may ask for. The defaults keep the largest batch a trainer sends (4,096
    searches of one step, up to ``topk`` 16) and bound an answer to ``max_results`` documents (about 40 MB of
    wiki-18 passages)."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_queries: int = 4096
    max_topk: int = 100
    max_results: int = 65536

    def __post_init__(self):
        for name in ("max_body_bytes", "max_queries", "max_topk", "max_results"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"retrieval server {name}={value!r} must be a positive integer")

    def check(self, num_queries: int, topk: int) -> None:
        """``LimitExceeded`` naming the limit when a request asks for more than these limits allow."""
        if num_queries > self.max_queries:
            raise LimitExceeded(f"{num_queries} queries in one request; at most {self.max_queries}")
        if not 1 <= topk <= self.max_topk:
            raise LimitExceeded(f"topk={topk} must be between 1 and {self.max_topk}")
        if num_queries * topk > self.max_results:
            raise LimitExceeded(f"{num_queries} queries x topk {topk} = {num_queries * topk} documents; "
                                f"at most {self.max_results} per request")


class BodySizeLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared by Content-Length or streamed) is answered
    413 without being stored; a body within the limit is passed on whole."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send) -> None:
        body = json.dumps({"detail": f"request body over {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return whole

        await self.app(scope, replay, send)


def _validation_message(exc: RequestValidationError) -> str:
    """``topk: Input should be a finite number`` (the offending input itself is not echoed: NaN is not JSON)."""
    parts = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            parts.append("the body is not valid JSON")
            continue
        where = ".".join(str(p) for p in error.get("loc", ())[1:]) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "bad request: " + "; ".join(parts)


def install_limits(app: FastAPI, limits: ServerLimits) -> None:
    """Malformed requests and ``LimitExceeded`` -> 400 with a one-line ``detail``; bodies over the limit -> 413."""

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=400)

    @app.exception_handler(LimitExceeded)
    async def over_limit(_request: Request, exc: LimitExceeded) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
