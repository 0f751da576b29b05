"""How the prompt-only engine rides out endpoint faults: which failures are passing (retried with exponential
backoff and full jitter, or after the server's Retry-After), which end the run (EndpointError), and which
replies are unusable (a malformed reply: the step gets no action, the run goes on)."""

from __future__ import annotations

import email.utils
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from recipe.forge.safe_text import terminal_text

# statuses worth another try: timeout, conflict, too early, rate limit, and every server-side error
RETRY_STATUSES = frozenset({408, 409, 425, 429})


class EndpointError(RuntimeError):
    """The endpoint stayed unusable: out of retries or past the deadline, or it refused the requests
    themselves (a wrong key, model or parameter). One line naming the endpoint and the last error."""


class MalformedReply(ValueError):
    """A reply that is not a usable chat completion: not JSON, HTML, truncated, no choices, no message."""


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` more tries after the first; waits of ``uniform(0, min(max_backoff_s, backoff_s * 2^n))``
    or the server's Retry-After; every try and wait within ``deadline_s`` of the first try."""

    max_retries: int
    backoff_s: float
    max_backoff_s: float
    deadline_s: float

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The jittered wait before retry number ``retry`` (0-based)."""
        return rng.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2.0 ** retry))


def retry_after_s(exc: BaseException) -> float | None:
    """The wait the server asked for (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return max(0.0, float(headers["retry-after-ms"]) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def is_transient(exc: BaseException) -> bool:
    """A fault another try may not meet: no connection, a timeout, a cut transfer, a rate limit, a 5xx."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes timeouts and transfers cut short
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
    return False


def describe(exc: BaseException) -> str:
    """One line for a fault: the status where there is one, the exception's type and its message (inert)."""
    status = getattr(exc, "status_code", None)
    head = f"HTTP {status} " if status is not None else ""
    text = " ".join(terminal_text(exc).split())
    return f"{head}{type(exc).__name__}: {text[:300]}"


class Retrier:
    """Runs one request under the policy. Shared by the generator's threads: once one request has given up,
    the others stop retrying too (the run is ending), instead of each waiting out its own deadline."""

    def __init__(self, policy: RetryPolicy, endpoint: str, seed: int | None = None):
        self.policy = policy
        self.endpoint = endpoint
        self.retries = 0  # retries made so far (all requests)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._gave_up = threading.Event()
        self._failure = ""

    def _fail(self, message: str) -> EndpointError:
        with self._lock:
            if not self._gave_up.is_set():
                self._failure = message
                self._gave_up.set()
        return EndpointError(self._failure)

    def call(self, attempt: Callable[[float], Any]) -> Any:
        """``attempt(timeout_s)`` until it returns, a non-transient fault, or the retries or deadline run out
        (EndpointError). MalformedReply passes through at once: retrying an unusable answer is not the fix."""
        p = self.policy
        start = time.monotonic()
        tries = 0
        while True:
            if self._gave_up.is_set():
                raise EndpointError(self._failure)
            remaining = p.deadline_s - (time.monotonic() - start)
            tries += 1
            try:
                return attempt(max(remaining, 0.001))
            except MalformedReply:
                raise
            except Exception as exc:  # the openai client's faults; anything else is not the endpoint's
                if not _is_openai_error(exc):
                    raise
                last = describe(exc)
                if not is_transient(exc):
                    raise self._fail(f"the endpoint {self.endpoint} refused the request: {last}") from None
                elapsed = time.monotonic() - start
                if tries > p.max_retries:
                    raise self._fail(f"the endpoint {self.endpoint} failed {tries} tries in {elapsed:.1f} s "
                                     f"(trainer.api.max_retries={p.max_retries}); last error: {last}") from None
                with self._lock:
                    asked = retry_after_s(exc)
                    wait = asked if asked is not None else p.backoff(tries - 1, self._rng)
                    self.retries += 1
                if elapsed + wait >= p.deadline_s:
                    raise self._fail(f"the endpoint {self.endpoint} failed {tries} tries in {elapsed:.1f} s; a "
                                     f"retry after {wait:.1f} s would pass trainer.api.retry_deadline_s="
                                     f"{p.deadline_s:g}; last error: {last}") from None
                if self._gave_up.wait(wait):
                    raise EndpointError(self._failure)


def _is_openai_error(exc: BaseException) -> bool:
    import openai

    return isinstance(exc, openai.OpenAIError)
