"""Tests of the routes, run by `pytest` against the real server: `TestClient` serves this
project with the `filerouter` binary, every request in the sandbox, with a database and kv store
of its own that start empty."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from filerouter.testing import TestClient

PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(PROJECT) as client:
        yield client


def test_get_says_hello(client: TestClient) -> None:
    response = client.get("/", params={"name": "Ada"})
    assert response.status_code == 200
    assert response.json() == {"message": "Hello, Ada!"}


def test_post_echoes_the_json_body(client: TestClient) -> None:
    response = client.post("/", json={"title": "Dune"})
    assert response.status_code == 201
    assert response.json() == {"received": {"title": "Dune"}}


def test_an_unknown_path_is_404(client: TestClient) -> None:
    assert client.get("/nowhere").status_code == 404
