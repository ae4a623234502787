"""Fixtures shared by the dev tooling's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftsched.dev import supervisor as sv


@pytest.fixture
def children() -> Iterator[list[sv.Child]]:
    """Processes a test starts; killed (group and all) and reaped at the end whatever happened."""
    started: list[sv.Child] = []
    yield started
    for child in started:
        child.kill()
