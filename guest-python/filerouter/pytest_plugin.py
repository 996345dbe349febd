"""The pytest plugin the `filerouter` wheel installs (entry point `pytest11`).

- the `client` fixture: a `filerouter.testing.TestClient` of the project being tested, started
  once per test module. The project is pytest's root folder (where `pyproject.toml` is); a
  `filerouter_project` fixture of your own (returning a path) chooses another. A `client`
  fixture of your own replaces this one.
- a failing test's report ends with the log of every TestClient running while it failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .testing import LIVE, TestClient

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator


@pytest.fixture(scope="module")
def filerouter_project(request: pytest.FixtureRequest) -> Path:
    """The project folder the `client` fixture serves: pytest's root folder."""
    return Path(request.config.rootpath)


@pytest.fixture(scope="module")
def client(filerouter_project: Path) -> Iterator[TestClient]:
    """A TestClient of the project, started once per test module (its data folder too)."""
    with TestClient(filerouter_project) as test_client:
        yield test_client


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for test_client in list(LIVE):
            report.sections.append((f"filerouter server log ({test_client.project})", test_client.log[-20000:]))
