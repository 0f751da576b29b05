"""The prompt-only engine's section of the run config, ``trainer.api`` (:class:`ApiSettings`), read by
recipe/forge/run_config.py. A leaf: it imports nothing of the engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agent_system.config_checks import ConfigError, check_int, check_range
from recipe.forge.config_reader import ConfigReader


@dataclass(frozen=True)
class ApiSettings:
    """``trainer.api``: the chat endpoint and how it is called."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 8  # more tries of a request after a passing fault (no connection, timeout, 429, 5xx)
    retry_backoff_s: float = 1.0  # the first wait; doubled per retry, full jitter, capped below
    retry_max_backoff_s: float = 60.0
    retry_deadline_s: float = 600.0  # all tries and waits of one request, from its first try

    def __post_init__(self):
        if not str(self.base_url).startswith(("http://", "https://")):
            raise ConfigError(f"trainer.api.base_url={self.base_url!r} must be an http(s) URL")
        if not self.model:
            raise ConfigError("trainer.api.model must not be empty")
        check_int("trainer.api.max_concurrency", self.max_concurrency, 1)
        check_range("trainer.api.timeout_s", self.timeout_s, 0.0, low_inclusive=False)
        check_int("trainer.api.max_retries", self.max_retries, 0)
        check_range("trainer.api.retry_backoff_s", self.retry_backoff_s, 0.0)
        check_range("trainer.api.retry_max_backoff_s", self.retry_max_backoff_s, 0.0)
        check_range("trainer.api.retry_deadline_s", self.retry_deadline_s, 0.0, low_inclusive=False)


def read_api_settings(reader: ConfigReader) -> ApiSettings:
    return ApiSettings(**reader.section("trainer.api", [f.name for f in dataclasses.fields(ApiSettings)]))
