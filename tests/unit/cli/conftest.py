"""The CLI's unit tests talk to fake clients of one group: learning the groups from a replica
(`raftsched.client.groups.with_topology`, tested in tests/unit/client/test_groups_client.py and
through real processes in tests/integration/test_dev_groups.py) is left out of them."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.client import groups


@pytest.fixture(autouse=True)
def _one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    def as_given(client: Any, make_client: Any) -> Any:
        return client

    monkeypatch.setattr(groups, "with_topology", as_given)
