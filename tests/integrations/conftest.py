"""Shared fixtures for the environment integrations: generated ALFWorld games and the Search data set are
built once per test session under a temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def alfworld_games_dir(tmp_path_factory):
    """Six train games (one per task type: seed mod 6) and two out-of-distribution games."""
    from agent_system.environments.env_package.alfworld.game_files import generated_games

    root = str(tmp_path_factory.mktemp("alfworld_games"))
    generated_games(root, "train", 6, workers=2, progress=False)
    generated_games(root, "eval_out_of_distribution", 2, workers=2, progress=False)
    return root


@pytest.fixture(scope="session")
def search_dataset(tmp_path_factory):
    from agent_system.environments.env_package.search.synthetic import ensure_builtin_dataset

    return ensure_builtin_dataset(str(tmp_path_factory.mktemp("search")), 60)


@pytest.fixture(scope="session")
def retrieval_server(search_dataset):
    from agent_system.environments.env_package.search.local_server import LocalRetrievalServer

    with LocalRetrievalServer(search_dataset["corpus"]) as server:
        yield server
